"""Engine behaviour: no float drift, metrics added and dropped while running, sharing, query."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from metrics_engine.engine import Engine
from metrics_engine.errors import MetricSyntaxError

from .streams import METRICS, events


@pytest.fixture
def engine(tmp_path):
    eng = Engine(tmp_path / "e", fsync=False, chunk_bytes_target=1024, segment_bytes_max=8192)
    yield eng
    eng.close()


def _two_pass(xs):
    n = len(xs)
    fr = [Fraction(x) for x in xs]
    mean = sum(fr) / n
    var = sum((x - mean) ** 2 for x in fr) / (n - 1)
    m2 = sum((x - mean) ** 2 for x in fr) / n
    m3 = sum((x - mean) ** 3 for x in fr) / n
    return float(mean), math.sqrt(float(var)), float(m3) / float(m2) ** 1.5


def test_no_float_drift_on_values_near_1e9(engine):
    """A million-fold churn of adds and removes near 1e9: still equal to a two-pass result."""
    engine.define("SELECT AVG(x) AS m, STDDEV(x) AS sd, SKEWNESS(x) AS sk FROM s RANGE 50 SECONDS")
    rng = random.Random(3)
    window: list[tuple[int, float]] = []
    worst = 0.0
    for i in range(4000):
        x = 1e9 + rng.uniform(-1, 1) * rng.choice([1e-3, 1.0, 1e3])
        out = engine.ingest("s", {"x": x}, i * 1000)
        window = [(t, v) for t, v in window if t > i * 1000 - 50_000] + [(i * 1000, x)]
        if i % 97 == 0 and len(window) > 2:
            mean, sd, sk = _two_pass([v for _, v in window])
            for got, want in ((out["m"], mean), (out["sd"], sd), (out["sk"], sk)):
                worst = max(worst, abs(got - want) / abs(want))
    assert worst <= 1e-12, worst


def test_integer_money_stays_exact(engine):
    engine.define("SELECT SUM(amount) AS s FROM p RANGE UNBOUNDED")
    big = 10**17 + 1
    for i in range(5):
        out = engine.ingest("p", {"amount": big}, i)
    assert out["s"] == 5 * big and isinstance(out["s"], int)


def test_metrics_added_while_running_match_metrics_defined_from_the_start(tmp_path):
    stream = events(1500, 5)
    ref = Engine(tmp_path / "ref", fsync=False)
    for m in METRICS:
        ref.define(m)
    want = [ref.ingest("payments", ev, t) for t, ev in stream]
    ref.close()
    eng = Engine(tmp_path / "live", fsync=False, chunk_bytes_target=1024)
    eng.define(METRICS[2])  # 1 hour delayed: the longest retention, so later ones are complete
    eng.define(METRICS[3])  # 1 day, excluding current
    for t, ev in stream[:700]:
        eng.ingest("payments", ev, t)
    added = eng.define(METRICS[0]) + eng.define(METRICS[1]) + eng.define(METRICS[4])
    assert added == ["s5", "n5", "mx5", "avg5", "cnp", "sk"]
    for i, (t, ev) in enumerate(stream[700:], start=700):
        got = eng.ingest("payments", ev, t)
        assert got == want[i], i
    eng.drop("mx5")
    eng.drop("avg5")
    t, ev = stream[-1]
    out = eng.ingest("payments", ev, t + 1)
    assert "mx5" not in out and "avg5" not in out and "s5" in out
    eng.close()


def test_shared_prefixes_and_explain(engine):
    engine.define("SELECT SUM(amount), COUNT(*) FROM payments GROUP BY card RANGE 5 MINUTES")
    engine.define("SELECT AVG(amount) FROM payments GROUP BY merchant RANGE 5 MINUTES")
    engine.define("SELECT MAX(amount) FROM payments GROUP BY card "
                  "RANGE 5 MINUTES EXCLUDING CURRENT")
    text = engine.explain()
    assert text.count("window RANGE 5 MINUTES (") == 1  # Q1 and Q2 share one window node
    assert text.count("cursor current") == 1  # every RANGE window shares the tail
    assert text.count("cursor ts <= t - 300000ms") == 1  # the two 5-minute windows share a head
    assert text.count("state moments(amount) order 1") == 2  # SUM and AVG: one per group-by
    assert text.count("group by card") == 2


def test_define_is_idempotent_and_rejects_conflicts(engine):
    q = "SELECT SUM(amount) AS s FROM p GROUP BY card RANGE 5 MINUTES"
    assert engine.define(q) == ["s"]
    assert engine.define(q) == ["s"]
    with pytest.raises(ValueError):
        engine.define("SELECT MAX(amount) AS s FROM p GROUP BY card RANGE 5 MINUTES")
    with pytest.raises(MetricSyntaxError):
        engine.define("SELECT SUM(amount) AS FROM p")
    assert [m.name for m in engine.metrics()] == ["s"]


def test_query_reads_without_changing_state(engine):
    engine.define("SELECT COUNT(*) AS n, SUM(amount) AS s FROM p GROUP BY card RANGE 1 MINUTES")
    engine.ingest("p", {"card": "a", "amount": 5}, 0)
    engine.ingest("p", {"card": "a", "amount": 7}, 30_000)
    before = engine.digest()
    assert engine.query("n", "a", 30_000) == 2
    assert engine.query("s", ("a",), 70_000) == 7  # the first one left the window
    assert engine.query("n", "a", 100_000) == 0
    assert engine.query("n", "zzz", 30_000) == 0
    assert engine.digest() == before
    # An old ts is clamped to the last one seen.
    assert engine.ingest("p", {"card": "a", "amount": 1}, 10)["n"] == 3


def test_digest_equal_for_equal_histories(tmp_path):
    digests = []
    for name in ("a", "b"):
        eng = Engine(tmp_path / name, fsync=False, cache_entries_max=16 if name == "b" else 10**6)
        for m in METRICS:
            eng.define(m)
        for t, ev in events(800, 2):
            eng.ingest("payments", ev, t)
        digests.append(eng.digest())
        eng.close()
    assert digests[0] == digests[1]


def test_a_window_spanning_more_chunks_than_the_lowered_cache_evicts_exactly(tmp_path):
    """A window's tail cursor reads chunks far older than the newest ones: with more chunks in
    the window than the cache of lowered chunks holds, the chunk it lowers is the oldest cached
    one and must not be dropped from the cache before it is read (the native core panicked:
    'no entry found for key')."""
    eng = Engine(tmp_path / "e", fsync=False, chunk_bytes_target=128, segment_bytes_max=1 << 20)
    try:
        eng.define("SELECT SUM(amount) AS s, COUNT(*) AS n FROM p GROUP BY card RANGE 1 MINUTES")
        step_ms = 20  # 3,000 events in a window: about 1,000 chunks of ~3 events
        window: dict[str, list[tuple[int, int]]] = {}
        for i in range(6_000):
            ts, card, amount = i * step_ms, f"c{i % 3}", i % 7
            got = eng.ingest("p", {"card": card, "amount": amount}, ts)
            held = [(t, a) for t, a in window.get(card, []) if t > ts - 60_000] + [(ts, amount)]
            window[card] = held
            assert (got["s"], got["n"]) == (sum(a for _, a in held), len(held)), i
    finally:
        eng.close()


def test_a_dropped_plan_frees_its_native_core_and_reservoir():
    """The native core holds its reservoir where the cyclic collector cannot see it, so a
    reservoir pointing back at the core (its hand-off) must not keep both alive: a plan
    dropped (a features task per partition, a parity engine per key range) frees its state."""
    import gc
    import weakref

    from metrics_engine.language import parse
    from metrics_engine.plan import Plan
    from metrics_engine.reservoir import StreamReservoir

    made: list[StreamReservoir] = []

    def reservoir(_stream: str) -> StreamReservoir:
        made.append(StreamReservoir(None, None, None))
        return made[-1]

    plan = Plan(reservoir)
    for d in parse("SELECT COUNT(*) AS n FROM payments GROUP BY card "
                   "HOPPING 2 DAYS EVERY 1 DAY"):
        plan.add(d)
    for i in range(10):
        plan.ingest("payments", {"card": f"c{i % 3}"}, 1_700_000_000_000 + i)
    ref = weakref.ref(made.pop())
    del plan
    gc.collect()
    assert ref() is None


def test_ingest_by_name_is_ingest_sorted_by_name(tmp_path):
    """``ingest_by_name`` (what the service stores per run) is ``ingest``'s dict in the sorted
    order of the names, value and type, also after metrics are added and dropped."""
    opts = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8192)
    a, b = Engine(tmp_path / "a", **opts), Engine(tmp_path / "b", **opts)
    for e in (a, b):
        for m in METRICS:
            e.define(m)
    late = ("SELECT SUM(amount) AS a_late, COUNT(*) AS z_late FROM payments GROUP BY card "
            "RANGE 1 HOURS")
    stream = events(300, 11)
    for i, (t, ev) in enumerate(stream):
        if i == 100:
            for e in (a, b):
                e.define(late)
        if i == 200:
            for e in (a, b):
                e.drop("s5")
        want = a.ingest("payments", ev, t)
        got = b.ingest_by_name("payments", ev, t)
        assert list(got) == sorted(want)
        assert got == want
        assert [type(v) for v in got.values()] == [type(want[k]) for k in got]
    assert b.ingest_by_name("other", {}, 0) == {}
    for e in (a, b):
        e.close()
