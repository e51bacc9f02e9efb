"""A backfilled metric equals one that was live all along; one added late online does not.
Built per key partition, the snapshot equals the one-task build's, state for state."""

import pyarrow.parquet as pq
import pytest

from metrics_engine.engine import Engine
from pipeline.backfill import MANIFEST, WORK, backfill, backfill_in_one_task
from pipeline.feature_sets import W1
from pipeline.features import parse_definitions
from pipeline.ordering import InvariantViolation
from pipeline.synthetic import generate

NEW = ["SELECT COUNT(DISTINCT merchant) AS card_merchants_12h, MAX(amount) AS card_max_12h "
       "FROM payments GROUP BY card RANGE 12 HOURS"]
# Every kind of window and state that holds positions: MIN and OLDEST over a window that
# excludes the current event, MAX and DISTINCT over a calendar window (whose head feeds no
# window and lags), a delayed window without GROUP BY (one partition), a two-column key.
MORE = [
    "SELECT MIN(amount) AS card_min_1h, OLDEST(merchant) AS card_first_merchant_1h "
    "FROM payments GROUP BY card RANGE 1 HOURS EXCLUDING CURRENT",
    "SELECT MAX(amount) AS merchant_max_2d, COUNT(DISTINCT card) AS merchant_cards_2d "
    "FROM payments GROUP BY merchant HOPPING 2 DAYS EVERY 1 DAYS",
    "SELECT MAX(amount) AS all_max_10m, COUNT(*) AS all_n_10m FROM payments "
    "RANGE 10 MINUTES DELAY 1 MINUTES",
    "SELECT MIN(amount) AS card_mcc_min_30m FROM payments GROUP BY card, mcc RANGE 30 MINUTES",
]
SPLIT = 6_000
PARTITIONS = 3


def _dicts(table):
    return [{k: v for k, v in r.items() if k != "seq"} for r in table.to_pylist()]


def _engine(path, defs):
    e = Engine(path, fsync=False)
    for text in defs:
        e.define(text)
    return e


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    table = generate("tiny", 7)
    d = tmp_path_factory.mktemp("history")
    pq.write_table(table.slice(0, SPLIT), d / "history.parquet")
    return d, _dicts(table)


def test_backfilled_metric_equals_one_live_all_along(spark, data, tmp_path):
    d, rows = data
    live = _engine(tmp_path / "live", [*W1, *NEW])
    for r in rows[:SPLIT]:
        live.ingest("payments", r, r["ts"])

    manifest = backfill(spark.read.parquet(str(d)), NEW, W1, tmp_path / "snap",
                        partitions=PARTITIONS)
    assert manifest.events == SPLIT and manifest.new_metrics == ["card_merchants_12h",
                                                                 "card_max_12h"]
    assert (tmp_path / "snap" / MANIFEST).exists()
    assert not (tmp_path / "snap" / WORK).exists()
    assert manifest.digest == live.digest()

    restored = Engine(tmp_path / "restored", fsync=False)
    restored.restore(tmp_path / "snap")
    late = _engine(tmp_path / "late", W1)  # the new metric defined online at the split
    for r in rows[:SPLIT]:
        late.ingest("payments", r, r["ts"])
    for text in NEW:
        late.define(text)

    mismatches_backfilled = mismatches_late = 0
    for r in rows[SPLIT:]:
        want = live.ingest("payments", r, r["ts"])
        got = restored.ingest("payments", r, r["ts"])
        late_values = late.ingest("payments", r, r["ts"])
        mismatches_backfilled += sum(got[k] != want[k] for k in want)
        mismatches_late += sum(late_values[k] != want[k] for k in want)
    assert mismatches_backfilled == 0
    assert restored.digest() == live.digest()
    # Without a backfill the new metric is wrong for hours: this test can tell the difference.
    assert mismatches_late > 0
    for e in (live, restored, late):
        e.close()


def test_partitioned_build_equals_the_one_task_build(spark, data, tmp_path):
    d, rows = data
    new = [*NEW, *MORE]
    events = spark.read.parquet(str(d))
    one = backfill_in_one_task(events, new, W1, tmp_path / "one")
    parted = backfill(events, new, W1, tmp_path / "parted", partitions=PARTITIONS)
    assert (parted.events, parted.last_seq, parted.last_ts) == (one.events, one.last_seq,
                                                                 one.last_ts)
    assert parted.digest == one.digest

    a, b = Engine(tmp_path / "a", fsync=False), Engine(tmp_path / "b", fsync=False)
    a.restore(tmp_path / "one")
    b.restore(tmp_path / "parted")
    assert b.digest() == a.digest()
    # Keys left their windows and were freed before the snapshot: the merge kept them freed.
    groups = {(m.window, repr(m.where), m.group_by) for m in parse_definitions([*W1, *new])}
    ever = sum(len({tuple(r[f] for f in g[2]) for r in rows[:SPLIT]}) for g in groups)
    assert 0 < b._plan.streams["payments"].core.key_count() < ever
    compared = 0
    for r in rows[SPLIT:]:
        want = a.ingest("payments", r, r["ts"])
        got = b.ingest("payments", r, r["ts"])
        assert got == want
        compared += len(want)
    assert compared == (len(rows) - SPLIT) * len(parse_definitions([*W1, *new]))
    assert b.digest() == a.digest()
    a.close()
    b.close()


def test_a_failed_backfill_leaves_no_snapshot(spark, data, tmp_path):
    d, _ = data
    with pytest.raises(InvariantViolation, match="lack columns"):
        backfill(spark.read.parquet(str(d)),
                 ["SELECT SUM(nope) AS s FROM payments GROUP BY card RANGE 1 HOURS"], W1,
                 tmp_path / "snap", partitions=PARTITIONS)
    assert not any((tmp_path / "snap").iterdir())
