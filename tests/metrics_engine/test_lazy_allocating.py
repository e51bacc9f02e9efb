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
