"""A group-by with one sliding window whose states allocate for a new key (a distinct set,
an OLDEST queue, power sums: W2's 24 h windows) is evicted lazily by default (native lazy.rs,
`LAZY_MIN_ALLOCATING`), where one of plain sums and counts needs `LAZY_MIN_TABLES` windows:
its new keys log their events instead of making those states. Values (and types) equal the
brute-force oracle and an engine with every table eager, and so does the digest; a snapshot
of either restores into the other."""

from __future__ import annotations

from metrics_engine import plan as plan_module
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same
from .test_lazy_eviction import EAGER, OPTS, STREAM

ALLOCATING = ("SELECT COUNT(DISTINCT merchant) AS dm, OLDEST(amount) AS old, "
              "STDDEV_POP(amount) AS sd, SUM(amount) AS s FROM payments GROUP BY card "
              "RANGE 900 MILLISECONDS")
PLAIN = ("SELECT SUM(amount) AS ms, COUNT(*) AS mc FROM payments GROUP BY merchant "
         "RANGE 900 MILLISECONDS")


def _engine(path) -> Engine:
    eng = Engine(path, **OPTS)
    for text in (ALLOCATING, PLAIN):
        eng.define(text)
    return eng


def _feed(eng, events) -> list[dict]:
    return [eng.ingest("payments", ev, t) for t, ev in events]


def test_one_window_of_allocating_states_is_lazy_and_exact(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None)  # the core's defaults
    lazy = _engine(tmp_path / "lazy")
    got = _feed(lazy, STREAM)
    # The card group-by is lazy (its one window keeps allocating states), the merchant
    # group-by (sums and counts, one window) is not: one lazy space, whose keys logged.
    counts = lazy._plan.streams["payments"].core.lazy_counts()
    assert len(counts) == 1
    ((logged, _, turned, _),) = counts
    assert logged > 0 and turned > 0
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", EAGER)
    eager = _engine(tmp_path / "eager")
    want = _feed(eager, STREAM)
    assert eager._plan.streams["payments"].core.lazy_counts() == []
    assert got == want
    assert lazy.digest() == eager.digest()
    for text in (ALLOCATING, PLAIN):
        for d in parse(text):
            for i, w in enumerate(expected(d, STREAM)):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)
    lazy.close()
    eager.close()


def test_snapshots_restore_between_lazy_and_eager(tmp_path, monkeypatch):
    half = len(STREAM) // 2
    for writer, reader in ((None, EAGER), (EAGER, None)):
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", writer)
        eng = _engine(tmp_path / f"w{writer}")
        _feed(eng, STREAM[:half])
        eng.snapshot(tmp_path / f"snap{writer}")
        want = _feed(eng, STREAM[half:])
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", reader)
        other = Engine(tmp_path / f"r{writer}", **OPTS)
        other.restore(tmp_path / f"snap{writer}")
        assert _feed(other, STREAM[half:]) == want
        assert other.digest() == eng.digest()
        eng.close()
        other.close()


def _many_keys(seed: int) -> list[tuple[int, dict]]:
    """Two rounds of 300 new cards (key ids across several pages of the logs, lazy.rs
    `PAGE_IDS` = 64), each card 1 to 6 events (a log of up to 4 fills; a fifth turns it
    eager), an idle gap between the rounds longer than the window (every key leaves it: the
    second round's keys take freed ids)."""
    import random

    rng = random.Random(seed)
    t, out = 1_700_000_000_000, []
    for rnd in range(2):
        cards = [f"{rnd}-{i}" for i in range(300) for _ in range(rng.randrange(1, 7))]
        rng.shuffle(cards)
        for card in cards:
            t += rng.randrange(3)
            out.append((t, {"card": card, "merchant": rng.choice(["m1", "m2", "m3", None]),
                            "amount": rng.choice([rng.randrange(-50, 500), 1.25, None])}))
        t += 5_000
    return out


def test_logs_across_pages_and_reused_ids_equal_the_eager_path(tmp_path, monkeypatch):
    events = _many_keys(3)
    runs = {}
    for mode, lazy_min in (("lazy", None), ("eager", EAGER)):
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", lazy_min)
        eng = Engine(tmp_path / mode, **OPTS)
        eng.define(ALLOCATING.replace("900 MILLISECONDS", "2 SECONDS"))
        got = _feed(eng, events)
        core = eng._plan.streams["payments"].core
        runs[mode] = (got, eng.digest(), core.key_ids(), core.lazy_counts())
        eng.close()
    (got, digest, ids, counts), (want, want_digest, _, _) = runs["lazy"], runs["eager"]
    ((_, _, turned, _),) = counts
    (live, made), = ids
    assert turned > 0  # some logs filled and turned eager
    assert 128 < made < 600  # ids beyond two pages, and freed ids taken again
    assert got == want
    assert digest == want_digest
