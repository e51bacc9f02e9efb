"""The sliding windows' record slab grows without copying its records (native slab.rs:
one mapping grown by mremap, a record made when its id first needs it).

Two dozen misaligned windows over one group-by (W1's P3 shape, scaled down) while the live
keys rise to a few hundred, fall back as cards stop coming (ids freed and reused) and rise
again: the slab grows several times, records exist only for the ids made, every value
equals the brute-force oracle, and a clean close and reopen midway, or a snapshot restored
on another engine, carries on with the same values and digest as an engine fed straight
through.
"""

from __future__ import annotations

import random

import pytest

from metrics_engine import plan as plan_module
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

T0 = 1_700_000_000_000
WINDOWS = 24
OPTS = dict(chunk_bytes_target=1500, segment_bytes_max=6000, fsync=False)


def _texts() -> list[str]:
    out = []
    for i in range(WINDOWS):
        extra = f", MAX(amount) AS mx{i}" if i % 8 == 0 else ""  # the min/max deque too
        out.append(f"SELECT SUM(amount) AS s{i}, COUNT(*) AS c{i}{extra} FROM payments "
                   f"GROUP BY card RANGE {600 + 37 * i} MILLISECONDS")
    return out


def _events(seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    # Dense (most cards new: live keys climb), sparse (windows empty out: ids are freed),
    # dense again (freed ids are taken by new cards).
    for phase, (n, gap) in enumerate([(260, 3), (40, 120), (260, 3)]):
        for i in range(n):
            t += rng.randrange(gap + 1)
            card = rng.choice([f"{phase}-{i}", f"{phase}-{i // 3}", "regular"])
            amount = rng.choice([rng.randrange(-500, 5000), None, 2.5])
            out.append((t, {"card": card, "amount": amount}))
    return out


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """The slab holds eager keys' records: every table here is evicted by its head (many
    windows would make most keys lazy, logged outside the slab: test_lazy_eviction.py)."""
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", 10**6)


def _engine(path, texts):
    eng = Engine(path, **OPTS)
    for text in texts:
        eng.define(text)
    return eng


def test_a_growing_slab_matches_the_oracle_through_restart_and_restore(tmp_path):
    texts, stream = _texts(), _events(5)
    half = len(stream) // 2
    straight = _engine(tmp_path / "straight", texts)
    want_values = [straight.ingest("payments", ev, t) for t, ev in stream]
    core = straight._plan.streams["payments"].core
    ((grows, capacity, ready),) = core.slab_shape()
    ((_, made),) = core.key_ids()
    # Grown several times, each only when the ids needed it (no slack beyond a doubling),
    # and records only for the ids made (pages are touched as the ids come).
    assert grows >= 3
    assert capacity // 2 < made <= capacity
    assert ready == made

    eng = _engine(tmp_path / "e", texts)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:half]]
    eng.snapshot(tmp_path / "snap")
    eng.close()
    eng = Engine(tmp_path / "e", **OPTS)  # reopened: the states come back from state/
    other = Engine(tmp_path / "other", **OPTS)
    other.restore(tmp_path / "snap")
    assert eng.digest() == other.digest()
    rest = stream[half:]
    got += [eng.ingest("payments", ev, t) for t, ev in rest]
    got_other = [other.ingest("payments", ev, t) for t, ev in rest]
    assert got == want_values
    assert got_other == want_values[half:]
    assert eng.digest() == other.digest() == straight.digest()
    for e in (eng, other, straight):
        e.close()

    for text in texts:
        for d in parse(text):
            want = expected(d, stream)
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)


def test_a_slab_grows_past_the_size_where_huge_pages_are_advised(tmp_path):
    """120 windows make a record of ~15 KiB, so 2,500 live cards take the slab past 4 MiB,
    where it is advised huge pages, and on through 8 and 16 MiB, keeping every record.
    Advising only the 2 MiB-aligned part of a mapping split it into areas of two kinds, and
    the next growth was refused (mremap: EFAULT) and aborted the process. Whether the split
    happens depends on where the kernel places the mapping, so this test does not always
    meet it; ``bench/w2_days.py --days 2 --fraction 16`` did, every time."""
    windows = 120
    eng = Engine(tmp_path / "e", **OPTS)
    for i in range(windows):
        eng.define(f"SELECT COUNT(*) AS c{i} FROM payments GROUP BY card "
                   f"RANGE {3_600_000 + i} MILLISECONDS")
    cards = 2_500
    for n in range(cards):
        got = eng.ingest("payments", {"card": f"c{n}", "amount": 1}, T0 + n)
        assert got["c0"] == 1 and got[f"c{windows - 1}"] == 1  # every card once, all live
    again = eng.ingest("payments", {"card": "c0", "amount": 1}, T0 + cards)
    assert {again[f"c{i}"] for i in range(windows)} == {2}  # the first record survived
    core = eng._plan.streams["payments"].core
    ((grows, capacity, ready),) = core.slab_shape()
    assert ready == cards and capacity * windows * 64 > 16 << 20  # grown past 4, 8, 16 MiB
    eng.close()
