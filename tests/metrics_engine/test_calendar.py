"""Calendar windows (tumbling/hopping) roll per key, lazily, at bucket boundaries: a boundary
costs nothing for keys nobody touches, and values stay exact across boundaries, snapshots,
restores and metrics added while running."""

from __future__ import annotations

import random

from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import check_carries_on, check_values, expected, same

DAY = 86_400_000
T0 = 1_700_006_400_000  # a UTC midnight
AGGS = ("COUNT(*), COUNT(merchant), SUM(amount), AVG(amount), MIN(amount), MAX(amount), "
        "STDDEV(amount), SKEWNESS(amount), COUNT(DISTINCT merchant), OLDEST(amount), "
        "RECENT(merchant), RATIO(channel = 'cnp'), TIME_SINCE_LAST()")
OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8192)


def _events(n: int, seed: int, step: list[int]) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    for i in range(n):
        t += rng.choice(step)
        out.append((t, {"id": i, "card": rng.choice(["a", "b", "c", 1, 1.0, True]),
                        "merchant": rng.choice(["m1", "m2", "m3", None]),
                        "channel": rng.choice(["cnp", "cp"]),
                        "amount": rng.choice([rng.randrange(-50, 100), None, 1e9 + 0.1,
                                              round(rng.uniform(-1e3, 1e3), 2)])}))
    return out


_check = check_values


def _work(eng: Engine) -> int:
    return eng._plan.streams["payments"].core.roll_work()


def test_a_boundary_rolls_only_the_keys_that_are_touched(tmp_path):
    """5000 keys hold a day each; crossing midnight with one key's event does O(1) bucket
    work (that key, plus one key of the slow sweep), not one roll per key."""
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define("SELECT COUNT(*) AS n, SUM(amount) AS s, MIN(amount) AS mn, "
               "COUNT(DISTINCT merchant) AS dm FROM payments GROUP BY card "
               "HOPPING 7 DAYS EVERY 1 DAY")
    keys = 5000
    for i in range(keys):
        eng.ingest("payments", {"card": f"c{i}", "amount": i, "merchant": "m"}, T0 + i)
    before = _work(eng)
    out = eng.ingest("payments", {"card": "c7", "amount": 1, "merchant": "m"}, T0 + DAY)
    assert out == {"n": 1, "s": 7, "mn": 7, "dm": 1}
    assert _work(eng) - before <= 2  # c7's closed bucket, at most one swept key's
    # Reading another key rolls that key alone.
    before = _work(eng)
    assert eng.query("n", "c9", T0 + DAY + 1) == 1
    assert _work(eng) == before  # a query rolls a copy
    out = eng.ingest("payments", {"card": "c9", "amount": 2, "merchant": "m"}, T0 + DAY + 2)
    assert out["n"] == 1 and out["s"] == 9
    assert _work(eng) - before <= 2
    eng.close()


def test_keys_that_stop_coming_are_freed_by_the_sweep(tmp_path):
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define("SELECT COUNT(*) AS n FROM payments GROUP BY card TUMBLING 1 DAY")
    for i in range(50):
        eng.ingest("payments", {"card": f"c{i}"}, T0 + i)
    core = eng._plan.streams["payments"].core
    assert core.key_count() == 50
    for j in range(1000):  # two days later, one key only: the sweep passes every old key
        eng.ingest("payments", {"card": "z"}, T0 + 2 * DAY + j)
    assert core.key_count() == 1
    eng.close()


def test_exact_across_boundaries_with_snapshot_and_restore_between(tmp_path):
    """Snapshot just before a boundary, restore elsewhere, cross it: both engines equal the
    brute force for every event, and digests equal a run that never stopped."""
    text = f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 6 SECONDS EVERY 2 SECONDS"
    defs = parse(text)
    stream = _events(600, 3, [0, 300, 700, 1000, 1999, 2000, 4500])
    cut = next(i for i, (t, _) in enumerate(stream) if i > 300
               and (t - T0) // 2000 != (stream[i - 1][0] - T0) // 2000)
    ref = Engine(tmp_path / "ref", **OPTS)
    ref.define(text)
    want = [ref.ingest("payments", ev, t) for t, ev in stream]
    _check(defs, stream, want)
    a = Engine(tmp_path / "a", **OPTS)
    a.define(text)
    for t, ev in stream[:cut]:  # the next event opens a new bucket
        a.ingest("payments", ev, t)
    a.snapshot(tmp_path / "snap")
    b = Engine(tmp_path / "b", **OPTS)
    b.restore(tmp_path / "snap")
    assert b.digest() == a.digest()
    got_b = [b.ingest("payments", ev, t) for t, ev in stream[cut:]]
    got_a = [a.ingest("payments", ev, t) for t, ev in stream[cut:]]
    _check(defs, stream, got_b, start=cut)
    assert got_a == got_b == want[cut:]
    assert a.digest() == b.digest() == ref.digest()
    for e in (a, b, ref):
        e.close()


def test_states_added_to_a_running_calendar_window_are_backfilled_exactly(tmp_path):
    first = "SELECT COUNT(*) AS n FROM payments GROUP BY card TUMBLING 4 SECONDS"
    later = [f"SELECT {AGGS} FROM payments GROUP BY card TUMBLING 4 SECONDS",
             "SELECT MAX(amount) AS mx, OLDEST(merchant) AS om FROM payments "
             "HOPPING 8 SECONDS EVERY 2 SECONDS"]
    stream = _events(400, 5, [0, 500, 1000, 1500, 3000])
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(first)
    half = 200
    for t, ev in stream[:half]:
        eng.ingest("payments", ev, t)
    for text in later:  # new states of the running window, and a new window
        eng.define(text)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[half:]]
    _check(parse(first) + [d for text in later for d in parse(text)], stream, got, start=half)
    eng.close()


def test_the_window_start_moves_over_many_events_not_at_midnight(tmp_path):
    """The calendar window's head (which only holds the reservoir back) passes the day a
    window lets go of a bounded step per event, and values stay exact meanwhile."""
    text = "SELECT COUNT(*) AS n, SUM(amount) AS s FROM payments GROUP BY card TUMBLING 1 DAY"
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(text)
    stream = [(T0 + i, {"card": f"c{i % 7}", "amount": i}) for i in range(3000)]
    stream += [(T0 + DAY + i, {"card": f"c{i % 7}", "amount": i}) for i in range(300)]
    stream += [(T0 + 2 * DAY + i, {"card": f"c{i % 7}", "amount": i}) for i in range(300)]
    sp = eng._plan.streams["payments"]
    head = next(c for spec, c in sp.cursors.items() if spec[0] == "hop")
    got, moved = [], []
    for t, ev in stream:
        before = head.pos
        got.append(eng.ingest("payments", ev, t))
        moved.append(head.pos - before)
    assert max(moved) <= 64 and head.pos >= 3000  # day 0 passed, a step at a time
    _check(parse(text), stream, got)
    eng.close()


def _held(eng: Engine) -> int:
    return eng._plan.streams["payments"].core.held_windows()


def test_a_window_of_one_closed_bucket_is_that_buckets_partial(tmp_path):
    """Key a's window goes from one closed bucket to two, three, back to one and to two
    again: every value equals the brute force (and a query at each stage equals it too), the
    key holds window states apart from its buckets only while two or more closed buckets are
    in its window, and a snapshot taken at each stage, restored elsewhere, continues with the
    same values, the same sharing and the same digest."""
    text = f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 3 SECONDS EVERY 1 SECOND"
    defs = parse(text)
    s = 1000  # one bucket
    # (bucket, offset, amount, merchant): the closed buckets in a's window at each event
    # are in the comment; the held count is what the key must hold then.
    plan = [
        (0, 100, 5, "m1", 0),        # {}      (bucket 0 open)
        (0, 900, 1e9 + 0.1, "m2", 0),  # {}
        (1, 200, -3, "m1", 0),       # {0}     the window is bucket 0's partial
        (1, 999, None, None, 0),     # {0}
        (2, 300, 7.25, "m3", 1),     # {0, 1}  two: the window is held
        (3, 400, 7.25, "m1", 1),     # {0, 1, 2}
        (4, 100, 2, "m2", 1),        # {1, 2, 3}
        (7, 0, 40, "m2", 0),         # {4}     1, 2 and 3 left: back to one
        (8, 500, -1, None, 0),       # {7}
        (9, 100, 6, "m3", 1),        # {7, 8}
        (12, 0, 3, "m1", 0),         # {9}
        (12, 1, 1e9 - 0.7, "m4", 0),  # {9}
        (20, 0, 9, "m1", 0),         # {}      everything left
    ]
    stream = [(T0 + b * s + off, {"card": "a", "amount": amt, "merchant": m,
                                  "channel": "cnp" if i % 2 else "cp"})
              for i, (b, off, amt, m, _) in enumerate(plan)]
    want = {d.name: expected(d, stream) for d in defs}
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(text)
    for i, (t, ev) in enumerate(stream):
        got = eng.ingest("payments", ev, t)
        for d in defs:
            assert same(got[d.name], want[d.name][i]), (i, d.name, got[d.name], want[d.name][i])
        assert _held(eng) == plan[i][4], i
        # A query later in the same bucket sees what an event there would see.
        probe = stream[: i + 1] + [(t + 1, {"card": "a"})]
        for d in defs:
            if d.func in ("time_since_last", "ratio"):
                continue  # the probe event itself would count in RATIO's denominator
            q = eng.query(d.name, "a", t + 1)
            w = expected(d, probe)[-1]
            assert same(q, w), (i, d.name, q, w)
        # Snapshot here, restore elsewhere, and carry on to the end from the copy.
        snap = tmp_path / f"snap{i}"
        eng.snapshot(snap)
        other = Engine(tmp_path / f"r{i}", **OPTS)
        other.restore(snap)
        assert other.digest() == eng.digest()
        check_carries_on(other, stream, i + 1, want, defs, _held, [p[4] for p in plan])
        other.close()
    eng.close()


def test_keys_moving_between_one_and_many_closed_buckets_stay_exact(tmp_path):
    """Many keys, sparse in time, against the brute force, through snapshots restored at
    random points: sharing a one-bucket window must never show in a value."""
    text = f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 4 SECONDS EVERY 1 SECOND"
    defs = parse(text)
    stream = _events(500, 11, [0, 150, 400, 1000, 1700, 2500, 5200])
    want = {d.name: expected(d, stream) for d in defs}
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(text)
    held = set()
    for k, i in enumerate(range(len(stream))):
        t, ev = stream[i]
        got = eng.ingest("payments", ev, t)
        for d in defs:
            assert same(got[d.name], want[d.name][i]), (i, d.name, got[d.name], want[d.name][i])
        held.add(_held(eng) > 0)
        if k % 97 == 50:
            eng.snapshot(tmp_path / f"s{k}")
            eng.close()
            eng = Engine(tmp_path / f"e{k}", **OPTS)
            eng.restore(tmp_path / f"s{k}")
    assert held == {True, False}  # the run passed through both shapes
    eng.close()


def test_nan_and_infinities_are_skipped_by_calendar_min_max_as_by_sliding_ones(tmp_path):
    """The definition: MIN/MAX of a window is the least/greatest of its finite numbers (ints,
    floats, booleans), the earliest of equals, null when there is none; NaN, +-inf and null
    are skipped (the reservoir keeps non-finite floats as null, so a window must give the same
    whether an event is read live or back from disk). The calendar path (one best per bucket,
    folded when buckets close) gives at every event what the brute force gives, and at events
    on a bucket's start exactly what the event-by-event sliding path gives over the same span
    (``RANGE 3 SECONDS DELAY 1 MILLISECOND`` is ``[b - 3 s, b)`` at ``t = b``), value and type;
    so does a calendar MIN/MAX added to the running stream and filled from the reservoir."""
    nan, inf = float("nan"), float("inf")
    hop = ("SELECT MIN(amount) AS mn, MAX(amount) AS mx FROM payments GROUP BY card "
           "HOPPING 3 SECONDS EVERY 1 SECOND")
    tum = ("SELECT MIN(amount) AS tmn, MAX(amount) AS tmx FROM payments GROUP BY card "
           "TUMBLING 2 SECONDS")
    slide = ("SELECT MIN(amount) AS smn, MAX(amount) AS smx FROM payments GROUP BY card "
             "RANGE 3 SECONDS DELAY 1 MILLISECOND")
    slide2 = ("SELECT MIN(amount) AS stmn, MAX(amount) AS stmx FROM payments GROUP BY card "
              "RANGE 2 SECONDS DELAY 1 MILLISECOND")
    late = ("SELECT MIN(amount) AS lmn, MAX(amount) AS lmx FROM payments GROUP BY card "
            "HOPPING 4 SECONDS EVERY 2 SECONDS")
    rng = random.Random(17)
    values = [nan, nan, inf, -inf, None, 3, 3.0, True, 1, -2.5, 7, 7.0, -inf, nan]
    t, stream = T0, []
    for _ in range(400):
        t += rng.choice([0, 250, 1000, 1000, 2000, 3500])
        if rng.random() < 0.5:
            t -= (t - T0) % 1000  # on a bucket's start
        t = max(t, stream[-1][0] if stream else t)
        card = rng.choice(["a", "b", "n"])  # "n" mostly sees NaN
        amount = nan if card == "n" and rng.random() < 0.8 else rng.choice(values)
        stream.append((t, {"card": card, "amount": amount}))
    eng = Engine(tmp_path / "e", **OPTS)
    for text in (hop, tum, slide, slide2):
        eng.define(text)
    half = len(stream) // 2
    got = []
    for i, (t, ev) in enumerate(stream):
        if i == half:
            eng.define(late)
            eng.snapshot(tmp_path / "snap")
            eng.close()
            eng = Engine(tmp_path / "r", **OPTS)
            eng.restore(tmp_path / "snap")
        got.append(eng.ingest("payments", ev, t))
    eng.close()
    _check(parse(hop) + parse(tum) + parse(slide), stream, got)
    _check(parse(late), stream, got[half:], start=half)
    on_start = [i for i, (t, _) in enumerate(stream) if (t - T0) % 1000 == 0]
    on_even = [i for i in on_start if (stream[i][0] - T0) % 2000 == 0]
    assert len(on_start) > 100 and len(on_even) > 50
    for i in on_start:
        assert same(got[i]["mn"], got[i]["smn"]) and same(got[i]["mx"], got[i]["smx"]), i
    for i in on_even:
        assert same(got[i]["tmn"], got[i]["stmn"]) and same(got[i]["tmx"], got[i]["stmx"]), i
    n_max = [g["mx"] for g, (_, ev) in zip(got, stream, strict=True) if ev["card"] == "n"]
    assert None in n_max and any(v is not None for v in n_max)  # NaN-only and mixed windows


def test_states_added_to_a_running_hopping_window_are_refolded_exactly(tmp_path):
    """Every key holds three closed buckets of a hopping window when new states join it: the
    backfill puts the window's events into those buckets' partials and every key's window
    is folded again from them, so a read before any further event rolls a key (a query)
    already sees the new states exact, and so do the events after."""
    first = "SELECT COUNT(*) AS n FROM payments GROUP BY card HOPPING 6 SECONDS EVERY 2 SECONDS"
    later = f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 6 SECONDS EVERY 2 SECONDS"
    cards = ["a", "b", "c", 1, True]
    stream = _events(250, 13, [0, 100, 300, 700, 1200, 2500])
    t = stream[-1][0] - (stream[-1][0] - T0) % 2000 + 2000  # the next bucket's start
    rng = random.Random(3)
    for k in range(4):  # every card in four buckets running: three closed ones at the cut
        for j, card in enumerate(cards):
            stream.append((t + k * 2000 + 10 * j, {
                "card": card, "amount": rng.choice([rng.randrange(-50, 100), 2.5, None]),
                "merchant": rng.choice(["m1", "m2", None]), "channel": rng.choice(["cnp", "cp"])}))
    cut = len(stream)
    stream += [(t + 8000 + tt - T0, ev) for tt, ev in _events(200, 14, [0, 300, 700, 1200])]
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(first)
    for t, ev in stream[:cut]:
        eng.ingest("payments", ev, t)
    assert _held(eng) == len(cards)
    eng.define(later)
    t_last = stream[cut - 1][0]
    for card in cards:
        probe = stream[:cut] + [(t_last, {"card": card})]
        for d in parse(later):
            if d.func in ("time_since_last", "ratio"):
                continue  # the probe event itself would count in RATIO's denominator
            q, w = eng.query(d.name, card, t_last), expected(d, probe)[-1]
            assert same(q, w), (card, d.name, q, w)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[cut:]]
    _check(parse(first) + parse(later), stream, got, start=cut)
    eng.close()


def test_buckets_of_a_few_events_stay_raw_and_exact(tmp_path):
    """A bucket of at most four events keeps them raw (no partials) until a window reads or
    folds it; a fifth event makes its partials. Values equal the brute force for keys of one
    to seven events a bucket, over windows of several lengths, across a snapshot and restore
    (raw buckets are written as the partials they stand for: digests equal a never-stopped
    run)."""
    texts = [f"SELECT {AGGS} FROM payments GROUP BY card HOPPING {m} SECONDS EVERY 1 SECOND"
             for m in (2, 5)]  # default names: each names its window
    rng = random.Random(11)
    stream = []
    for second in range(40):
        for card in range(8):
            for _ in range(rng.choice([0, 1, 1, 2, 3, 4, 5, 7])):
                stream.append((T0 + second * 1000 + rng.randrange(1000),
                               {"card": f"c{card}", "merchant": rng.choice(["m1", "m2", None]),
                                "channel": rng.choice(["cnp", "cp"]),
                                "amount": rng.choice([rng.randrange(-50, 100), None, 2.5,
                                                      round(rng.uniform(-1e3, 1e3), 2)])}))
    stream.sort(key=lambda e: e[0])
    defs = [d for text in texts for d in parse(text)]
    ref = Engine(tmp_path / "ref", **OPTS)
    for text in texts:
        ref.define(text)
    core = ref._plan.streams["payments"].core
    for i in range(3):  # one key's bucket: raw up to four events, partials from the fifth
        ref.ingest("payments", {"card": "solo", "amount": i}, T0 - 5000 + i)
    raw = core.raw_buckets()
    assert raw == 1  # one bucket, shared by the two windows (views of one table)
    for i in range(3, 5):
        ref.ingest("payments", {"card": "solo", "amount": i}, T0 - 5000 + i)
    assert core.raw_buckets() == 0
    start = 5
    got = [ref.ingest("payments", ev, t) for t, ev in stream]
    full = [(T0 - 5000 + i, {"card": "solo", "amount": i}) for i in range(5)] + stream
    _check(defs, full, got, start=start)
    cut = len(stream) // 2
    a = Engine(tmp_path / "a", **OPTS)
    for text in texts:
        a.define(text)
    for t, ev in full[:start + cut]:
        a.ingest("payments", ev, t)
    assert a._plan.streams["payments"].core.raw_buckets() > 0
    a.snapshot(tmp_path / "snap")
    b = Engine(tmp_path / "b", **OPTS)
    b.restore(tmp_path / "snap")
    assert b.digest() == a.digest()
    got_b = [b.ingest("payments", ev, t) for t, ev in full[start + cut:]]
    assert got_b == got[cut:]
    assert b.digest() == ref.digest()
    for e in (a, b, ref):
        e.close()
