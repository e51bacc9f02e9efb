"""Done-when of the pipeline: zero mismatches against the online engine on the tiny data set,
for every W1 metric and all 405 W2 features."""

import pyarrow.parquet as pq
import pytest

from pipeline.feature_sets import W1, w2
from pipeline.features import parse_definitions, point_in_time
from pipeline.parity import compare
from pipeline.synthetic import generate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    table = generate("tiny", 7)
    d = tmp_path_factory.mktemp("tiny")
    pq.write_table(table, d / "events.parquet", row_group_size=2_500)
    return d, table.to_pylist()


@pytest.mark.parametrize("name,defs", [("w1", W1), ("w2", w2())])
def test_tiny_parity_is_exact(spark, tiny, name, defs):
    d, rows = tiny
    names = [m.name for m in parse_definitions(defs)]
    out = point_in_time(spark.read.parquet(str(d)), defs).select("seq", *names).collect()
    offline = {r["seq"]: r.asDict() for r in out}
    assert len(offline) == len(rows)
    report = compare(rows, defs, offline)
    assert report.events == len(rows) and report.values == len(rows) * len(names)
    assert report.mismatches == 0, report.examples
    # The data set exercises the metrics: windows hold several events and values vary.
    assert max(r[names[1]] or 0 for r in offline.values()) > min(
        r[names[1]] or 0 for r in offline.values())
