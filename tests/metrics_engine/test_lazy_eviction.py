"""Many sliding windows over one group-by evict a key's events lazily (native lazy.rs).

A key with few events in the windows keeps them in a short log, and its window states are
folded from the log when read; a key whose log overflows turns eager (its states are made
from the log and its heads evict them, as before); a key that stops coming is swept and its
id freed. Here a dozen misaligned windows (W1's P3 shape, scaled down; one filtered, some with
every kind of state) see a hot card that overflows its log, cards that go idle for longer
than every window and come back, and new cards all the time, while windows are added (filled
from the reservoir) and dropped midway. Every value equals the brute-force oracle and, value
and type, an engine with lazy eviction off; snapshots restore either way (a snapshot of the
eager engine is what the engine wrote before lazy eviction), a clean reopen and a SIGKILL
followed by a replay carry on with the same values and digest.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from metrics_engine import plan as plan_module
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

T0 = 1_700_000_000_000
WINDOWS = 12
OPTS = dict(chunk_bytes_target=1500, segment_bytes_max=6000, fsync=False)
EAGER = 10**6  # LAZY_MIN_TABLES that no group-by reaches: every table evicted by its head
BIG = 2**62


def _texts() -> list[str]:
    out = []
    for i in range(WINDOWS):
        where = "WHERE channel = 'cnp' " if i % 5 == 4 else ""
        more = (f", MAX(amount) AS mx{i}, OLDEST(amount) AS old{i}, "
                f"COUNT(DISTINCT merchant) AS dm{i}, STDDEV_POP(amount) AS sd{i}, "
                f"RECENT(amount) AS rc{i}, TIME_SINCE_LAST() AS ts{i}, "
                f"RATIO(channel = 'cnp') AS r{i}") if i % 4 == 1 else ""
        out.append(f"SELECT SUM(amount) AS s{i}, COUNT(*) AS c{i}{more} FROM payments "
                   f"{where}GROUP BY card RANGE {700 + 53 * i} MILLISECONDS")
    return out


# Added and dropped midway: a new window (filled from the reservoir), a new state of an
# existing window (backfilled alone), and a window that goes.
LATE_WINDOW = ("SELECT SUM(amount) AS late_s, MIN(amount) AS late_mn FROM payments "
               "GROUP BY card RANGE 1200 MILLISECONDS")
LATE_STATE = ("SELECT MIN(amount) AS late_state_mn FROM payments GROUP BY card "
              "RANGE 753 MILLISECONDS")
DROPPED = ("s10", "c10")


def _events(seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    # Dense (a hot card overflows its log; cards come and go), idle (longer than every
    # window: states empty out, the sweep frees ids), dense again (idle cards come back).
    for phase, (n, gap) in enumerate([(220, 40), (12, 2500), (220, 40), (25, 700), (160, 50)]):
        for i in range(n):
            t += rng.randrange(gap + 1)
            r = rng.random()
            if r < 0.15:
                card = "hot"
            elif r < 0.35:
                card = f"back{rng.randrange(6)}"
            else:
                card = f"{phase}-{i // 2}"
            amount = rng.choice([rng.randrange(-500, 5000), None, 2.5, BIG - rng.randrange(9),
                                 rng.randrange(100)])
            out.append((t, {"card": card, "channel": rng.choice(["cnp", "cp"]),
                            "merchant": rng.choice(["m1", "m2", None]), "amount": amount}))
    return out


STREAM = _events(7)
HALF = 330


def _engine(path, lazy_min=None) -> Engine:
    eng = Engine(path, **OPTS)
    for text in _texts():
        eng.define(text)
    if lazy_min is not None:
        assert eng._plan.streams["payments"].core.lazy_min_tables == lazy_min
    return eng


def _feed(eng: Engine, events, probe=None) -> list[dict]:
    got = []
    for t, ev in events:
        got.append(eng.ingest("payments", ev, t))
        if probe is not None:
            probe(eng)
    return got


def _plan_changes(eng: Engine) -> None:
    eng.define(LATE_WINDOW)
    eng.define(LATE_STATE)
    for name in DROPPED:
        eng.drop(name)


def _run(path, lazy_min: int | None, monkeypatch, probe=None) -> tuple[list[dict], str, Engine]:
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", lazy_min)
    eng = _engine(path, lazy_min)
    got = _feed(eng, STREAM[:HALF], probe)
    _plan_changes(eng)
    got += _feed(eng, STREAM[HALF:], probe)
    return got, eng.digest(), eng


def test_lazy_eviction_equals_the_eager_path_and_the_oracle(tmp_path, monkeypatch):
    seen = {"logged": 0, "eager": 0}

    def probe(eng):
        core = eng._plan.streams["payments"].core
        ((logged, events, _turned, eager),) = core.lazy_counts()
        assert events <= logged * 4  # LOG_MAX events a key
        seen["logged"] = max(seen["logged"], logged)
        seen["eager"] = max(seen["eager"], eager)

    lazy, lazy_digest, a = _run(tmp_path / "lazy", None, monkeypatch, probe)
    ((_, _, turned, _),) = a._plan.streams["payments"].core.lazy_counts()
    ((_, made),) = a._plan.streams["payments"].core.key_ids()
    # Windows of the same slots over one raw key's fold gave the values of the window before.
    reused = a._plan.streams["payments"].core.reused_reads()
    eager, eager_digest, b = _run(tmp_path / "eager", EAGER, monkeypatch)
    assert b._plan.streams["payments"].core.lazy_counts() == []  # nothing lazy there
    for e in (a, b):
        e.close()
    # Both paths ran: keys logged, keys turned eager because their log was full (the hot
    # card), eager keys held by lazy tables.
    assert seen["logged"] > 5 and turned > 0 and seen["eager"] > 0 and reused > 0
    # Ids were freed and reused (a swept log gives its id back): far fewer ids made than
    # cards seen.
    assert made * 2 < len({ev["card"] for _, ev in STREAM}), made
    # Value and type, event by event, and the same digest.
    assert lazy == eager
    assert lazy_digest == eager_digest
    for text in _texts():
        for d in parse(text):
            if d.name in DROPPED:
                continue
            want = expected(d, STREAM)
            for i, w in enumerate(want):
                assert same(lazy[i][d.name], w), (d.name, i, lazy[i][d.name], w)
    for text in (LATE_WINDOW, LATE_STATE):
        for d in parse(text):
            want = expected(d, STREAM)
            for i in range(HALF, len(STREAM)):
                assert same(lazy[i][d.name], want[i]), (d.name, i, lazy[i][d.name], want[i])


def test_queries_of_raw_keys_equal_the_eager_path(tmp_path, monkeypatch):
    got = {}
    for mode, lazy_min in (("lazy", None), ("eager", EAGER)):
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", lazy_min)
        eng = _engine(tmp_path / mode)
        _feed(eng, STREAM[:200])
        t = STREAM[199][0]
        cards = sorted({ev["card"] for _, ev in STREAM[150:200]})
        got[mode] = [(eng.query(f"s{i}", c, t + dt), eng.query(f"c{i}", c, t + dt))
                     for c in cards for i in (0, 5, 11) for dt in (0, 400, 900)]
        # A query changes nothing: the engine carries on as the other.
        got[mode + "_after"] = _feed(eng, STREAM[200:260])
        got[mode + "_digest"] = eng.digest()
        eng.close()
    assert got["lazy"] == got["eager"]
    assert got["lazy_after"] == got["eager_after"]
    assert got["lazy_digest"] == got["eager_digest"]


def test_snapshots_restore_across_lazy_and_eager_engines(tmp_path, monkeypatch):
    want, want_digest, ref = _run(tmp_path / "ref", None, monkeypatch)
    ref.close()
    for writer, reader in ((None, None), (EAGER, None), (None, EAGER)):
        tag = f"{writer}-{reader}"
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", writer)
        eng = _engine(tmp_path / f"w{tag}")
        got = _feed(eng, STREAM[:HALF])
        _plan_changes(eng)
        got += _feed(eng, STREAM[HALF:HALF + 100])
        # The eager engine's snapshot is what the engine wrote before lazy eviction.
        eng.snapshot(tmp_path / f"snap{tag}")
        eng.close()
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", reader)
        other = Engine(tmp_path / f"r{tag}", **OPTS)
        other.restore(tmp_path / f"snap{tag}")
        reopened = Engine(tmp_path / f"w{tag}", **OPTS)
        assert other.digest() == reopened.digest()
        rest = STREAM[HALF + 100:]
        got_other = _feed(other, rest)
        got += _feed(reopened, rest)
        assert got == want, tag
        assert got_other == want[HALF + 100:], tag
        assert other.digest() == reopened.digest() == want_digest, tag
        other.close()
        reopened.close()


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from metrics_engine.engine import Engine
    from tests.metrics_engine.test_lazy_eviction import STREAM, OPTS, _texts
    eng = Engine({data!r}, chunk_bytes_target=OPTS["chunk_bytes_target"],
                 segment_bytes_max=OPTS["segment_bytes_max"])
    for text in _texts():
        eng.define(text)
    for i, (t, ev) in enumerate(STREAM):
        eng.ingest("payments", ev, t)
        if i + 1 == {kill} // 2:
            eng.sync()
        if i + 1 == {kill}:
            os.kill(os.getpid(), signal.SIGKILL)
""")


def test_sigkill_replay_and_refeed_give_the_same_values_and_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None)
    root = str(Path(__file__).resolve().parents[2])
    data = tmp_path / "crashed"
    kill = 500
    code = CHILD.format(root=root, data=str(data), kill=kill)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    ref = _engine(tmp_path / "ref")
    want = _feed(ref, STREAM)
    want_digest = ref.digest()
    ref.close()
    eng = Engine(data, **OPTS)
    durable = eng.durable_positions()["payments"]
    assert 0 < durable <= kill
    got = _feed(eng, STREAM[durable:])
    assert got == want[durable:]
    assert eng.digest() == want_digest
    eng.close()


@pytest.mark.parametrize("lazy_min", [1, 4, EAGER])
def test_one_window_or_many_the_values_are_the_same(tmp_path, monkeypatch, lazy_min):
    """A single lazy window (lazy_min 1) over a shared head with an eager one: the head
    evicts the eager window's rows and passes the lazy one's."""
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", lazy_min)
    texts = ["SELECT SUM(amount) AS a, MAX(amount) AS amx FROM payments GROUP BY card "
             "RANGE 900 MILLISECONDS",
             "SELECT COUNT(*) AS b, OLDEST(amount) AS bo FROM payments GROUP BY card "
             "RANGE 900 MILLISECONDS EXCLUDING CURRENT",
             "SELECT COUNT(*) AS m FROM payments GROUP BY merchant RANGE 900 MILLISECONDS"]
    eng = Engine(tmp_path / "e", **OPTS)
    for text in texts:
        eng.define(text)
    got = _feed(eng, STREAM)
    eng.close()
    for text in texts:
        for d in parse(text):
            want = expected(d, STREAM)
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (lazy_min, d.name, i, got[i][d.name], w)


def test_an_earlier_builds_snapshot_restores_into_lazy_tables(tmp_path, monkeypatch):
    """The snapshot fixture (written before lazy eviction) restored with every eligible table
    lazy: its digest, then values equal to the brute force and an engine fed everything."""
    from .snapshot_fixture import check_restores_and_carries_on

    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", 1)

    def lazy_tables_there(eng):
        assert eng._plan.streams["payments"].core.lazy_counts()

    check_restores_and_carries_on(tmp_path, lazy_tables_there)


@pytest.mark.parametrize("arrow", [False, True])
def test_batches_into_columns_equal_one_event_per_call(tmp_path, monkeypatch, arrow):
    """The batched call over lazy tables (folds read once, values reused by the windows
    after) gives the values, and types, of one event per call and of the eager path."""
    import numpy as np

    events = [(t, {**ev, "amount": ev["amount"] if isinstance(ev["amount"], int)
                   and abs(ev["amount"]) < 2**40 else 7,
                   "merchant": ev["merchant"] or "m0"}) for t, ev in STREAM]
    got = {}
    for mode, lazy_min in (("lazy", None), ("eager", EAGER)):
        monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", lazy_min)
        eng = _engine(tmp_path / f"call-{mode}")
        got[mode] = _feed(eng, events)
        eng.close()
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None)
    eng = _engine(tmp_path / "batch")
    batched: dict[str, list] = {}
    for lo in range(0, len(events), 97):
        part = events[lo:lo + 97]
        cols = {k: np.array([ev[k] for _, ev in part]) for k in ("card", "channel", "merchant",
                                                                 "amount")}
        out = eng.ingest_many("payments", np.array([t for t, _ in part]), cols, arrow=arrow)
        for k, v in out.items():
            batched.setdefault(k, []).extend(v.to_pylist() if arrow else v)
    assert eng._plan.streams["payments"].core.reused_reads() > 0
    eng.close()
    assert got["lazy"] == got["eager"]
    for i, want in enumerate(got["lazy"]):
        for k, w in want.items():
            assert batched[k][i] == w and type(batched[k][i]) is type(w), (k, i, batched[k][i], w)
