"""Values a state leaves out (null; NaN and infinities, which the engine takes as null since the
reservoir keeps them so; non-numbers for SUM and MIN) count the same whether a window takes an
event live or reads it back from disk, and a key whose window holds only such events leaves
cleanly. Checked against the brute force (tests/metrics_engine/oracle.py: ``stored``)."""

from __future__ import annotations

import random

import pytest

from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

T0 = 1_700_000_000_000
OPTS = dict(fsync=False, chunk_bytes_target=512, segment_bytes_max=4096)
NAN, INF = float("nan"), float("inf")
# Each definition is one group table whose slots can all skip an event: a key is freed while
# its window still holds events, which must then leave without finding it.
SKIPPING = [
    "SELECT MIN(amount) AS mn, MAX(amount) AS mx FROM p GROUP BY card RANGE 3 SECONDS",
    "SELECT SUM(amount) AS s, AVG(amount) AS a FROM p GROUP BY card RANGE 2 SECONDS "
    "DELAY 1 SECONDS",
    "SELECT COUNT(amount) AS c, COUNT(DISTINCT amount) AS d, OLDEST(amount) AS o, "
    "RECENT(amount) AS r FROM p GROUP BY card RANGE 3 SECONDS EXCLUDING CURRENT",
    "SELECT COUNT(*) AS nn, MIN(amount) AS nmn FROM p WHERE amount IS NULL GROUP BY card "
    "RANGE 2 SECONDS",
    "SELECT RATIO(amount IS NULL) AS rn, COUNT(*) AS n FROM p GROUP BY amount RANGE 2 SECONDS",
    "SELECT MAX(amount) AS hmx, COUNT(amount) AS hc FROM p GROUP BY card "
    "HOPPING 3 SECONDS EVERY 1 SECONDS",
]


def _stream(seed: int, n: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    values = [None, NAN, INF, -INF, "x", 3, 3.0, True, -2.5, 7, NAN, None]
    t, out = T0, []
    for _ in range(n):
        t += rng.choice([0, 300, 700, 1000, 1500, 2500, 4000])
        out.append((t, {"card": rng.choice(["a", "b", NAN]),
                        "amount": rng.choice(values)}))
    return out


def _check(stream, got, start=0):
    for text in SKIPPING:
        for d in parse(text):
            want = expected(d, stream)
            for i in range(start, len(stream)):
                g = got[i - start][d.name]
                assert same(g, want[i]), (d.name, i, stream[i], g, want[i])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_keys_holding_only_skipped_events_leave_cleanly(tmp_path, seed):
    stream = _stream(seed, 300)
    eng = Engine(tmp_path / "e", **OPTS)
    for text in SKIPPING:
        eng.define(text)
    got = [eng.ingest("p", ev, t) for t, ev in stream]
    eng.close()
    _check(stream, got)


@pytest.mark.parametrize("seed", [4, 5])
def test_nan_counts_the_same_live_and_read_back_after_a_restart(tmp_path, seed):
    """Restarts drop every event the engine lowered live: the events still in the windows
    then leave as read back from disk (NaN there is null), and must leave as they came in."""
    stream = _stream(seed, 300)
    eng = Engine(tmp_path / "e", **OPTS)
    for text in SKIPPING:
        eng.define(text)
    got = []
    for i, (t, ev) in enumerate(stream):
        if i % 40 == 39:
            eng.close()
            eng = Engine(tmp_path / "e", **OPTS)
        got.append(eng.ingest("p", ev, t))
    eng.close()
    _check(stream, got)


def test_nan_in_a_batch_counts_as_one_event_at_a_time(tmp_path):
    import numpy as np

    stream = _stream(6, 200)
    one = Engine(tmp_path / "one", **OPTS)
    many = Engine(tmp_path / "many", **OPTS)
    for text in SKIPPING:
        one.define(text)
        many.define(text)
    want = [one.ingest("p", ev, t) for t, ev in stream]
    cols = {"card": [ev["card"] for _, ev in stream], "amount": [ev["amount"] for _, ev in stream]}
    got = many.ingest_many("p", np.array([t for t, _ in stream], dtype=np.int64), cols)
    for name, col in got.items():
        for i, v in enumerate(col):
            assert same(v, want[i][name]), (name, i, v, want[i][name])
    assert one.digest() == many.digest()
    one.close()
    many.close()
    _check(stream, want)
