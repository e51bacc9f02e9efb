"""The features job equals Engine.ingest on a hand-made stream full of ts ties."""

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics_engine.engine import Engine
from pipeline.features import parse_definitions, plan_groups, point_in_time

DEFS = [
    "SELECT SUM(amount) AS card_sum_5m, COUNT(*) AS card_count_5m FROM payments "
    "GROUP BY card RANGE 5 MINUTES",
    "SELECT AVG(amount) AS merchant_avg_5m FROM payments GROUP BY merchant RANGE 5 MINUTES",
    "SELECT STDDEV(amount) AS card_sd_1h, SKEWNESS(amount) AS card_sk_1h, "
    "OLDEST(amount) AS card_old_1h, RECENT(amount) AS card_rec_1h, "
    "COUNT(DISTINCT merchant) AS card_merchants_1h, RATIO(channel = 'cnp') AS card_cnp_1h "
    "FROM payments GROUP BY card RANGE 1 HOURS",
    "SELECT TIME_SINCE_LAST() AS card_mcc_since FROM payments GROUP BY card, mcc "
    "RANGE 1 DAYS EXCLUDING CURRENT",
    "SELECT MAX(amount) AS card_max_week FROM payments GROUP BY card HOPPING 2 DAYS EVERY 1 DAYS",
]


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    rng = random.Random(7)
    rows, ts = [], 1_700_000_000_000
    for i in range(2500):
        ts += rng.choice([0, 0, 1, 500, 30_000, 120_000, 3_600_000])  # many exact ties
        rows.append({"event_id": f"e{i}", "ts": ts, "card": f"c{rng.randrange(40)}",
                     "merchant": f"m{rng.randrange(15)}", "mcc": str(5000 + rng.randrange(4)),
                     "channel": rng.choice(["cnp", "cp"]), "amount": rng.randrange(1, 100_000)})
    d = tmp_path_factory.mktemp("ev")
    pq.write_table(pa.Table.from_pylist(rows), d / "events.parquet", row_group_size=700)
    return d, rows


def test_groups_split_by_key():
    groups = plan_groups(parse_definitions(DEFS))
    assert [g.key for g in groups] == [("card",), ("merchant",), ("card", "mcc")]
    assert groups[0].names[:2] == ("card_sum_5m", "card_count_5m")


def test_spark_values_equal_the_online_engine(spark, stream, tmp_path):
    d, rows = stream
    out = point_in_time(spark.read.parquet(str(d)), DEFS, partitions=3).collect()
    got = {r.event_id: r.asDict() for r in out}
    engine = Engine(tmp_path / "engine", fsync=False)
    for text in DEFS:
        engine.define(text)
    names = [n for text in DEFS for n in (m.name for m in parse_definitions([text]))]
    mismatches = []
    for row in rows:
        live = engine.ingest("payments", row, row["ts"])
        for n in names:
            if got[row["event_id"]][n] != live[n] or type(got[row["event_id"]][n]) is not \
                    type(live[n]):
                mismatches.append((row["event_id"], n, got[row["event_id"]][n], live[n]))
    engine.close()
    assert len(got) == len(rows)
    assert mismatches == []


def test_groups_sharing_a_column_take_one_shuffle():
    from pipeline.feature_sets import W1, w2
    from pipeline.features import plan_partitions

    sets = plan_partitions(plan_groups(parse_definitions(w2())))
    assert [(s.key, len(s.names)) for s in sets] == [(("card",), 405)]
    sets = plan_partitions(plan_groups(parse_definitions(W1 + DEFS)))
    assert [s.key for s in sets] == [("card",), ("merchant",)]
