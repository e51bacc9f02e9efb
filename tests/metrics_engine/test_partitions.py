"""State built per key partition and merged equals one engine fed the whole stream."""

from __future__ import annotations

import random

import numpy as np
import pytest

from metrics_engine.engine import Engine
from metrics_engine.errors import InvariantViolation
from metrics_engine.partitions import (
    PartialState,
    assemble,
    cursor_positions,
    cursor_times,
    prepare,
    reservoir_dir,
)
from metrics_engine.reservoir import write_segment

DAY = 86_400_000
# Every kind of window and cursor: sliding (current tail), excluding the current event (the
# "before-current" tail), delayed, calendar (an idle head), no GROUP BY; MIN/MAX and OLDEST
# hold positions; 5-minute windows free keys over and over.
BY_CARD = [
    "SELECT SUM(amount) AS c_sum, COUNT(*) AS c_n FROM p GROUP BY card RANGE 5 MINUTES",
    "SELECT MIN(amount) AS c_min, OLDEST(amount) AS c_old FROM p GROUP BY card "
    "RANGE 1 HOURS EXCLUDING CURRENT",
    "SELECT MAX(amount) AS c_max, OLDEST(merchant) AS c_oldm, COUNT(DISTINCT merchant) AS c_d "
    "FROM p GROUP BY card HOPPING 2 DAYS EVERY 1 DAYS",
    "SELECT MAX(amount) AS cm_max FROM p GROUP BY card, merchant RANGE 30 MINUTES DELAY 10 MINUTES",
]
BY_MERCHANT = ["SELECT MIN(amount) AS m_min, AVG(amount) AS m_avg FROM p GROUP BY merchant "
               "RANGE 20 MINUTES"]
GLOBAL = ["SELECT COUNT(*) AS all_n, MAX(amount) AS all_max FROM p RANGE 10 MINUTES"]
TEXTS = [*BY_CARD, *BY_MERCHANT, *GLOBAL]


def _stream(n: int, seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = 5 * DAY + 3_600_000, []
    for _ in range(n):
        t += rng.choice([0, 0, 1_000, 30_000, 120_000, 600_000])
        amount = rng.choice([None, rng.randint(1, 500), rng.randint(1, 500) / 4])
        out.append((t, {"card": f"c{rng.randint(0, 30)}", "merchant": f"m{rng.randint(0, 8)}",
                        "amount": amount}))
    return out


def _engine(path, texts) -> Engine:
    e = Engine(path, fsync=False, chunk_bytes_target=2048)
    for t in texts:
        e.define(t)
    return e


def _build(stream, texts, key, parts) -> list[bytes]:
    """One partial state per hash partition of ``key`` (a tuple of fields)."""
    states = []
    for part in range(parts):
        ps = PartialState(texts)
        rows = [(i, t, ev) for i, (t, ev) in enumerate(stream)
                if hash(tuple(ev[k] for k in key)) % parts == part]
        for lo in range(0, len(rows), 97):  # several batches
            batch = rows[lo:lo + 97]
            ts = np.array([t for _, t, _ in batch], dtype=np.int64)
            cols = {f: [ev[f] for _, _, ev in batch] for f in ("card", "merchant", "amount")}
            ps.ingest(ts, cols, [i for i, _, _ in batch])
        states.append(ps.finish(stream[-1][0], len(stream)))
    return states


def _assembled(tmp_path, stream, parts=3) -> tuple[Engine, str]:
    d = tmp_path / "assembled"
    prepare(d, TEXTS)
    cut = len(stream) // 3  # two segments, as two range tasks would write them
    res = reservoir_dir(d, "p")
    for seg, (lo, hi) in enumerate([(0, cut), (cut, len(stream))], start=1):
        write_segment(res, seg, lo, stream[lo:hi], chunk_bytes_target=2048)
    states = (_build(stream, BY_CARD, ("card",), parts)
              + _build(stream, BY_MERCHANT, ("merchant",), parts)
              + _build(stream, GLOBAL, (), 1))
    ts = np.array([t for t, _ in stream])
    cursors = Engine(tmp_path / "specs", fsync=False)
    for t in TEXTS:
        cursors.define(t)
    times = cursor_times(list(cursors._plan.streams["p"].cursors), int(ts[0]), int(ts[-1]))
    cursors.close()
    count_le = dict(zip(times.tolist(), np.searchsorted(ts, times, "right").tolist(),
                        strict=True))
    digest = assemble(d, "p", states, count_le, int(ts[0]), int(ts[-1]))
    restored = Engine(tmp_path / "restored", fsync=False)
    restored.restore(d)
    return restored, digest


@pytest.mark.parametrize("seed", [1, 2])
def test_merged_partitions_equal_one_engine(tmp_path, seed):
    stream = _stream(3_000, seed)
    split = 2_000
    live = _engine(tmp_path / "live", TEXTS)
    for t, ev in stream[:split]:
        live.ingest("p", ev, t)
    restored, digest = _assembled(tmp_path, stream[:split])
    assert digest == live.digest() == restored.digest()
    assert live._plan.streams["p"].core.key_count() < 31 * 9 + 31 + 9  # keys were freed
    mismatches = 0
    for t, ev in stream[split:]:
        want, got = live.ingest("p", ev, t), restored.ingest("p", ev, t)
        assert set(got) == set(want)
        mismatches += sum(got[k] != want[k] for k in want)
    assert mismatches == 0
    assert restored.digest() == live.digest()
    live.close()
    restored.close()


def test_a_key_in_two_partitions_is_refused(tmp_path):
    stream = _stream(300, 3)
    d = tmp_path / "a"
    prepare(d, BY_CARD)
    write_segment(reservoir_dir(d, "p"), 1, 0, stream)
    twice = _build(stream, BY_CARD, ("card",), 1) * 2
    with pytest.raises(ValueError, match="two of the merged states"):
        assemble(d, "p", twice, {}, stream[0][0], stream[-1][0])


def test_positions_must_increase(tmp_path):
    ps = PartialState(BY_CARD)
    ps.ingest(np.array([1, 2]), {"card": ["a", "a"], "amount": [1, 2]}, [5, 4])
    with pytest.raises(InvariantViolation):
        ps.finish(2, 10)


def test_cursor_positions_replay_the_engine(tmp_path):
    """Idle calendar heads catch up IDLE_STEP_MAX events per event: a burst of events right
    after a bucket boundary leaves them behind, and the formula says where."""
    texts = ["SELECT COUNT(*) AS h FROM p HOPPING 1 HOURS EVERY 10 MINUTES",
             "SELECT COUNT(*) AS r FROM p RANGE 7 MINUTES DELAY 1 MINUTES",
             "SELECT COUNT(*) AS x FROM p RANGE 3 MINUTES EXCLUDING CURRENT"]
    rng = random.Random(9)
    e = _engine(tmp_path / "e", texts)
    ts, t = [], 1_000_000
    for i in range(6_000):
        if i < 4_000:
            t += 0 if i % 500 < 300 else rng.choice([0, 10, 60_000, 900_000])
        elif i in (5_995, 5_996):
            t += 7_200_000  # two hours after a burst of 2,000 at one time
        ts.append(t)
        e.ingest("p", {"k": 1}, t)
    sp = e._plan.streams["p"]
    specs = list(sp.cursors)
    arr = np.array(ts)
    times = cursor_times(specs, ts[0], ts[-1])
    count_le = dict(zip(times.tolist(), np.searchsorted(arr, times, "right").tolist(),
                        strict=True))
    got = cursor_positions(specs, len(ts), ts[0], ts[-1], count_le)
    assert got == {s: c.pos for s, c in sp.cursors.items()}
    hop = next(s for s in specs if s[0] == "hop")
    assert got[hop] < len(ts) - 5  # the head lags behind the burst: the replay matters
    e.close()
