"""``ingest_many(..., arrow=True)`` imports a batch's Arrow schema once per names and types
and then only the arrays (plan.py, by the export's ``schema_key``): the columns keep the
names, types and values of their own batch (those of the lists ``ingest_many`` gives without
``arrow``) when a field changes type between batches and when the plan gains or loses a
metric; and across engines, whose batches of the same names and types share one import
while another plan of the same names gets its own types."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from metrics_engine import Engine

OPTS = dict(fsync=False, chunk_bytes_target=2048, segment_bytes_max=16 * 1024)
T0 = 1_700_006_400_000


def _batch(i: int, amounts) -> tuple:
    n = len(amounts)
    ts = np.arange(n, dtype=np.int64) * 1_000 + T0 + i * n * 1_000
    return ts, {"card": np.array([f"c{j % 3}" for j in range(n)]), "amount": amounts}


def test_columns_keep_their_batchs_names_types_and_values(tmp_path):
    cols, lists = Engine(tmp_path / "cols", **OPTS), Engine(tmp_path / "lists", **OPTS)
    sp = cols._plan.streams

    def both(i, amounts, types):
        got = cols.ingest_many("p", *_batch(i, amounts), arrow=True)
        want = lists.ingest_many("p", *_batch(i, amounts))
        assert list(got) == list(want)
        assert {k: v.to_pylist() for k, v in got.items()} == want
        assert {k: v.type for k, v in got.items()} == types
        return sp["p"].arrow_schema

    for e in (cols, lists):
        e.define("SELECT COUNT(*) AS n, MIN(amount) AS lo FROM p GROUP BY card RANGE 2 SECONDS")
    ints = np.array([5, 7, 1, 4], dtype=np.int64)
    first = both(0, ints, {"n": pa.int64(), "lo": pa.int64()})
    assert both(1, ints + 1, {"n": pa.int64(), "lo": pa.int64()}) is first  # imported once
    # The field turns float once its ints left every window: MIN's column turns float64.
    floats = np.array([0.5, 2.5, 1.5, 3.5])
    assert both(5, floats, {"n": pa.int64(), "lo": pa.float64()}) is not first
    # A metric more, then one less.
    for e in (cols, lists):
        e.define("SELECT SUM(amount) AS total FROM p GROUP BY card RANGE 2 SECONDS")
    both(6, floats, {"n": pa.int64(), "lo": pa.float64(), "total": pa.float64()})
    for e in (cols, lists):
        e.drop("lo")
    both(7, floats, {"n": pa.int64(), "total": pa.float64()})
    for e in (cols, lists):
        e.close()


def test_engines_share_an_import_per_names_and_types(tmp_path):
    text = "SELECT COUNT(*) AS n, MIN(amount) AS lo FROM p GROUP BY card RANGE 2 SECONDS"
    ints = np.array([5, 7, 1, 4], dtype=np.int64)
    floats = np.array([0.5, 2.5, 1.5, 3.5])
    seen = []
    # Fresh engines one after the other, as a benchmark's repeats make them: the same
    # names with int, then float, then int amounts again.
    for i, (amounts, lo) in enumerate([(ints, pa.int64()), (floats, pa.float64()),
                                       (ints, pa.int64())]):
        eng, lists = Engine(tmp_path / f"e{i}", **OPTS), Engine(tmp_path / f"l{i}", **OPTS)
        for e in (eng, lists):
            e.define(text)
        got = eng.ingest_many("p", *_batch(0, amounts), arrow=True)
        want = lists.ingest_many("p", *_batch(0, amounts))
        assert {k: v.to_pylist() for k, v in got.items()} == want
        assert {k: v.type for k, v in got.items()} == {"n": pa.int64(), "lo": lo}
        seen.append(eng._plan.streams["p"].arrow_schema)
        eng.close()
        lists.close()
    assert seen[0] is seen[2]  # the same names and types: imported once
    assert seen[1][1] != seen[0][1]
