"""Features written by the workers (pyarrow, one file per partition) are exactly the
features job's DataFrame: same columns, types and values for every event; a second write
replaces the first; definitions needing a join fall back to Spark's writer, same values."""

import pyarrow.parquet as pq
import pytest

from pipeline.feature_files import write_features
from pipeline.feature_sets import W3, w2
from pipeline.features import point_in_time
from pipeline.synthetic import generate

W2_SOME = w2(["card", "card, merchant"])  # one partition set (card): written by the workers


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    d = tmp_path_factory.mktemp("ev")
    pq.write_table(generate("tiny", 7).slice(0, 4_000), d / "events.parquet",
                   row_group_size=1_500)
    return str(d / "events.parquet")


def _frame_rows(spark, events, defs):
    df = point_in_time(spark.read.parquet(events), defs, partitions=3)
    return df.columns, sorted((tuple(r) for r in df.collect()), key=lambda r: r[1])


@pytest.mark.parametrize("defs", [W2_SOME, W3], ids=["one-set", "joined"])
def test_files_hold_exactly_the_frame(spark, events, defs, tmp_path):
    out = tmp_path / "features"
    rows = write_features(spark.read.parquet(events), defs, str(out), partitions=3)
    assert rows == 4_000 and (out / "_SUCCESS").exists()
    columns, want = _frame_rows(spark, events, defs)
    written = spark.read.parquet(str(out))
    assert written.columns == columns
    frame = point_in_time(spark.read.parquet(events), defs)
    assert [(f.name, f.dataType) for f in written.schema] == \
        [(f.name, f.dataType) for f in frame.schema]
    got = sorted((tuple(r) for r in written.collect()), key=lambda r: r[1])
    assert got == want


def test_a_second_write_replaces_the_first(spark, events, tmp_path):
    out = tmp_path / "features"
    write_features(spark.read.parquet(events), W2_SOME, str(out), partitions=4)
    write_features(spark.read.parquet(events), W2_SOME, str(out), partitions=2)
    parts = sorted(p.name for p in out.iterdir() if not p.name.startswith("_"))
    assert parts == ["part-00000.parquet", "part-00001.parquet"]
    assert spark.read.parquet(str(out)).count() == 4_000
