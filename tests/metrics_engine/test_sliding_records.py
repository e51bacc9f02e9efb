"""Many sliding windows over one group-by keep a key's states in one record (keyed.rs
`KeySpace` slab): each window's slots at its own column, power sums inline as i128 until
they overflow (then arbitrary precision, then inline again once they fit).

Keys come and go so ids are freed and reused under a dozen misaligned windows, values near
2**62 push the power sums of VARIANCE and SKEWNESS past i128 and back, and the plan changes
midway (a window dropped, one added: the records are laid out anew). Every value is checked
against the brute-force oracle, and a snapshot restored on another engine carries on equal.
"""

from __future__ import annotations

import random

import pytest

from metrics_engine import plan as plan_module
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

T0 = 1_700_000_000_000
BIG = 2**62


def _window(i: int) -> str:
    # Misaligned lengths (W1's P3 shape, scaled down), one filtered.
    where = "WHERE channel = 'cnp' " if i == 3 else ""
    return (f"SELECT COUNT(*) AS n{i}, SUM(amount) AS s{i}, STDDEV_POP(amount) AS sd{i}, "
            f"SKEWNESS(amount) AS sk{i}, MAX(amount) AS mx{i} FROM payments {where}"
            f"GROUP BY card RANGE {1000 + 700 * i} MILLISECONDS")


def _events(n: int, seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    for i in range(n):
        t += rng.choice([0, 150, 400, 900])
        base = i // 4  # cards drift: ids are freed and taken by new cards
        amount = rng.choice([rng.randrange(-50, 50), BIG - rng.randrange(9), -BIG + 3,
                             1.5, None, rng.randrange(10**6)])
        out.append((t, {"card": rng.choice([base, base + 1, "k"]),
                        "channel": rng.choice(["cnp", "cp"]), "amount": amount}))
    return out


@pytest.mark.parametrize("lazy", [False, True])
def test_many_windows_in_one_record_match_the_oracle_through_overflow_and_plan_changes(
        tmp_path, monkeypatch, lazy):
    # Lazily (lazy.rs) most keys' states are folded from their logs, outside the records.
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None if lazy else 10**6)
    stream = _events(420, 3)
    texts = [_window(i) for i in range(12)]
    eng = Engine(tmp_path / "a", chunk_bytes_target=400, segment_bytes_max=2000, fsync=False)
    for text in texts:
        eng.define(text)
    core = lambda: eng._plan.streams["payments"].core  # noqa: E731
    got, big_seen = [], 0
    for t, ev in stream[:200]:
        got.append(eng.ingest("payments", ev, t))
        big_seen = max(big_seen, core().big_sums())
    # Windows drop and come: the survivors' states move to a new record layout.
    for name in ("n5", "s5", "sd5", "sk5", "mx5"):
        eng.drop(name)
    late = "SELECT SUM(amount) AS late_s, COUNT(*) AS late_n FROM payments GROUP BY card " \
           "RANGE 1300 MILLISECONDS"
    eng.define(late)
    for t, ev in stream[200:300]:
        got.append(eng.ingest("payments", ev, t))
        big_seen = max(big_seen, core().big_sums())
    eng.snapshot(tmp_path / "snap")
    other = Engine(tmp_path / "b", chunk_bytes_target=400, segment_bytes_max=2000, fsync=False)
    other.restore(tmp_path / "snap")
    assert other.digest() == eng.digest()
    rest = stream[300:]
    got_a = [eng.ingest("payments", ev, t) for t, ev in rest]
    got_b = [other.ingest("payments", ev, t) for t, ev in rest]
    assert got_a == got_b
    got += got_a
    made = sorted(m for _, m in core().key_ids())
    # The values near 2**62 overflowed i128 power sums, inside the records.
    assert big_seen > 0 or lazy
    # Quiet tail: the big values leave every window, the sums fit i128 again.
    quiet = {"card": "q", "channel": "cp", "amount": 1}
    for j in range(1, 40):
        eng.ingest("payments", quiet, stream[-1][0] + j * 1000)
    assert core().big_sums() == 0
    assert eng.digest() != other.digest()
    eng.close()
    other.close()
    assert made[0] + 20 < len({ev["card"] for _, ev in stream})  # ids were reused
    dropped = {"n5", "s5", "sd5", "sk5", "mx5"}
    for text in texts:
        for d in parse(text):
            if d.name in dropped:
                continue
            want = expected(d, stream)
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)
    (late_def,) = [d for d in parse(late) if d.name == "late_s"]
    want = expected(late_def, stream)
    for i in range(200, len(stream)):
        assert same(got[i]["late_s"], want[i]), (i, got[i]["late_s"], want[i])
