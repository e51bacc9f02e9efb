"""``ingest_many(..., arrow=True)`` answers the metrics whose value is always a float or an int,
and SUM, MIN, MAX, OLDEST and RECENT when a batch's values are all floats or all 64-bit ints,
as Arrow arrays made from the core's buffers: the same values, bit for bit, and the same nulls
as the lists it gives otherwise (and as ``ingest``), for every function and window."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir

T0 = 1_700_006_400_000
AGGS = ("COUNT(*), COUNT(merchant), SUM(amount), AVG(amount), MIN(amount), MAX(amount), "
        "STDDEV(amount), STDDEV_POP(amount), VAR_SAMP(amount), VAR_POP(amount), "
        "SKEWNESS(amount), COUNT(DISTINCT merchant), OLDEST(amount), RECENT(merchant), "
        "RATIO(channel = 'cnp'), TIME_SINCE_LAST()")
TEXTS = [f"SELECT {AGGS} FROM payments GROUP BY card {w}"
         for w in ("RANGE 5 SECONDS", "RANGE 4 SECONDS EXCLUDING CURRENT",
                   "HOPPING 6 SECONDS EVERY 2 SECONDS", "HOPPING 10 SECONDS EVERY 2 SECONDS")]


def _batch(n: int, seed: int, ints: bool = False) -> tuple[np.ndarray, dict]:
    rng = random.Random(seed)
    t, ts, rows = T0, [], []
    for _ in range(n):
        t += rng.choice([0, 100, 999, 1000, 2500, 9000])
        ts.append(t)
        rows.append({"card": rng.choice(["a", "b", "c"]),
                     "merchant": rng.choice(["m1", "m2", None]),
                     "channel": rng.choice(["cnp", "cp"]),
                     "amount": rng.choice(
                         [rng.randrange(-50, 100), None, 2**62, -(2**62)] if ints else
                         [rng.randrange(-50, 100), None, 2.5, 1e9 + 0.1,
                          round(rng.uniform(-1e3, 1e3), 2)])})
    cols = {k: pa.array([r[k] for r in rows]) for k in rows[0]}
    return np.array(ts, dtype=np.int64), cols


def _plan() -> Plan:
    """A memory-only plan, as the pipeline's feeder holds one."""
    p = Plan(lambda _stream: StreamReservoir(None, None, None))
    for text in TEXTS:
        for d in parse(text):
            p.add(d)
    assert p.streams["payments"].native_batch
    return p


@pytest.mark.parametrize("ints", [False, True])
def test_arrow_columns_equal_the_lists_bit_for_bit(ints):
    lists, arrays = _plan(), _plan()
    typed = 0
    for seed in range(4):  # several batches: state carries over between them
        ts, cols = _batch(300, seed, ints)
        want = lists.ingest_many("payments", ts, cols)
        got = arrays.ingest_many("payments", ts, cols, arrow=True)
        assert set(got) == set(want)
        for name, w in want.items():
            g = got[name]
            if isinstance(g, pa.Array):
                typed += 1
                assert g.type in (pa.float64(), pa.int64())
                g = g.to_pylist()
            assert len(g) == len(w)
            for a, b in zip(g, w, strict=True):
                assert type(a) is type(b), (name, a, b)
                if isinstance(a, float) and math.isnan(b):
                    assert math.isnan(a)
                else:
                    assert a == b and (not isinstance(a, float) or a.hex() == b.hex()), (name, a, b)
    # 11 of the 16 functions are always a float or an int; SUM, MIN, MAX and OLDEST of an
    # int field too when no value passes 64 bits (sums of 2**62 do: those stay lists), and
    # RECENT(merchant) is strings: a list. Per window and batch.
    if ints:
        assert 4 * 4 * 11 < typed < 4 * 4 * 15
    else:
        assert typed >= 4 * 4 * 11
