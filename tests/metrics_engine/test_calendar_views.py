"""Calendar windows of one group-by, filter and bucket width share their buckets (views of one
table, keyed.rs `View`): each window's values stay exact against the brute force for every
event, across snapshots and restores, aggregates and windows added or dropped while running,
and key partitions merged."""

from __future__ import annotations

import random

import numpy as np
import pytest

from metrics_engine.engine import Engine
from metrics_engine.language import parse
from metrics_engine.partitions import (
    PartialState,
    assemble,
    cursor_times,
    prepare,
    reservoir_dir,
)
from metrics_engine.reservoir import write_segment

from .oracle import check_carries_on, check_values, expected, same

T0 = 1_700_006_400_000  # a UTC midnight
AGGS = ("COUNT(*), SUM(amount), AVG(amount), MIN(amount), MAX(amount), STDDEV(amount), "
        "SKEWNESS(amount), COUNT(DISTINCT merchant), OLDEST(amount), RECENT(merchant), "
        "RATIO(channel = 'cnp'), TIME_SINCE_LAST()")
OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8192)
SIZES = (2, 5, 9)  # seconds, by 1 second: views of one table per group-by and filter


def _texts(aggs: str = AGGS) -> list[str]:
    out = []
    for group in ("GROUP BY card", "GROUP BY card, channel"):
        for m in SIZES:
            out.append(f"SELECT {aggs} FROM payments {group} HOPPING {m} SECONDS EVERY 1 SECOND")
    # A filtered group-by (its windows share a table of their own) and another bucket width.
    for m in (5, 9):
        out.append(f"SELECT {aggs} FROM payments WHERE amount > 0 GROUP BY merchant "
                   f"HOPPING {m} SECONDS EVERY 1 SECOND")
    out.append(f"SELECT {aggs} FROM payments GROUP BY card HOPPING 6 SECONDS EVERY 2 SECONDS")
    return out


def _stream(n: int, seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    for _ in range(n):
        t += rng.choice([0, 100, 400, 999, 1000, 1500, 3000, 12_000])
        out.append((t, {"card": rng.choice(["a", "b", "c", 1]),
                        "merchant": rng.choice(["m1", "m2", "m3", None]),
                        "channel": rng.choice(["cnp", "cp"]),
                        "amount": rng.choice([rng.randrange(-50, 100), None, 2.5,
                                              round(rng.uniform(-1e3, 1e3), 2)])}))
    return out


_check = check_values


def _core(eng: Engine):
    return eng._plan.streams["payments"].core


def test_windows_of_one_group_share_buckets_exact_across_restore(tmp_path):
    texts = _texts()
    defs = [d for text in texts for d in parse(text)]
    stream = _stream(500, 1)
    ref = Engine(tmp_path / "ref", **OPTS)
    for text in texts:
        ref.define(text)
    ref.ingest("payments", {"card": "solo", "amount": 1, "channel": "cp"}, T0 - 3000)
    # One bucket of one key per table (card, card x channel, filtered merchant, 2-second
    # buckets), not one per window.
    assert _core(ref).raw_buckets() == 4
    got = [ref.ingest("payments", ev, t) for t, ev in stream]
    full = [(T0 - 3000, {"card": "solo", "amount": 1, "channel": "cp"})] + stream
    _check(defs, full, got, start=1)
    cut = len(full) // 2
    a = Engine(tmp_path / "a", **OPTS)
    for text in texts:
        a.define(text)
    for t, ev in full[:cut]:
        a.ingest("payments", ev, t)
    a.snapshot(tmp_path / "snap")
    b = Engine(tmp_path / "b", **OPTS)
    b.restore(tmp_path / "snap")
    assert b.digest() == a.digest()
    got_b = [b.ingest("payments", ev, t) for t, ev in full[cut:]]
    assert got_b == got[cut - 1:]
    assert b.digest() == ref.digest()
    for e in (a, b, ref):
        e.close()


def test_aggregates_and_windows_added_while_running_are_filled_exactly(tmp_path):
    """COUNT over three windows of one table before any event; then SUM, MAX, OLDEST, COUNT
    DISTINCT added to the largest window (its table's new slots filled once, for every view,
    from the largest window's start), then to the smallest (the slots are there already),
    and a fourth window of the same group-by (the table holds events: a table of its own)."""
    first = [f"SELECT COUNT(*) AS n{m} FROM payments GROUP BY card "
             f"HOPPING {m} SECONDS EVERY 1 SECOND" for m in SIZES]
    later = [f"SELECT SUM(amount) AS s{m}, MAX(amount) AS x{m}, OLDEST(amount) AS o{m}, "
             f"COUNT(DISTINCT merchant) AS d{m} FROM payments GROUP BY card "
             f"HOPPING {m} SECONDS EVERY 1 SECOND" for m in (9, 2, 5)]
    later.append(f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 4 SECONDS EVERY 1 SECOND")
    stream = _stream(400, 2)
    eng = Engine(tmp_path / "e", **OPTS)
    for text in first:
        eng.define(text)
    half = 200
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:half]]
    _check([d for text in first for d in parse(text)], stream[:half], got)
    for text in later:
        eng.define(text)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[half:]]
    defs = [d for text in first + later for d in parse(text)]
    _check(defs, stream, got, start=half)
    t_last = stream[-1][0]
    for d in defs:
        if d.func in ("time_since_last", "ratio", "count"):
            continue  # the probe event would count itself
        probe = stream + [(t_last + 1, {"card": "a"})]
        assert same(eng.query(d.name, "a", t_last + 1), expected(d, probe)[-1]), d.name
    eng.close()


def test_dropping_windows_of_a_shared_table_keeps_the_others_exact(tmp_path):
    texts = [f"SELECT SUM(amount) AS s{m}, MIN(amount) AS mn{m}, OLDEST(merchant) AS o{m} "
             f"FROM payments GROUP BY card HOPPING {m} SECONDS EVERY 1 SECOND" for m in SIZES]
    stream = _stream(450, 3)
    eng = Engine(tmp_path / "e", **OPTS)
    for text in texts:
        eng.define(text)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:150]]
    for name in ("s9", "mn9", "o9"):  # the largest window leaves: buckets kept for 5 seconds
        eng.drop(name)
    got += [eng.ingest("payments", ev, t) for t, ev in stream[150:300]]
    for name in ("s2", "mn2"):
        eng.drop(name)
    got += [eng.ingest("payments", ev, t) for t, ev in stream[300:]]
    defs = {d.name: d for text in texts for d in parse(text)}
    for name, d in defs.items():
        want = expected(d, stream)
        for i, g in enumerate(got):
            if name in g:
                assert same(g[name], want[i]), (name, i, g[name], want[i])
    assert set(got[-1]) == {"s5", "mn5", "o5", "o2"}
    eng.close()


def test_partitions_merged_into_shared_tables_equal_one_engine(tmp_path):
    """Each view of a shared table is written and read by its own gid: a key comes once per
    view in a partial state, and is refused only when two partial states hold it."""
    texts = [f"SELECT SUM(amount) AS s{m}, MAX(amount) AS x{m}, OLDEST(merchant) AS o{m} "
             f"FROM payments GROUP BY card HOPPING {m} SECONDS EVERY 1 SECOND" for m in SIZES]
    stream = _stream(900, 4)
    split = 600
    live = Engine(tmp_path / "live", **OPTS)
    for text in texts:
        live.define(text)
    for t, ev in stream[:split]:
        live.ingest("payments", ev, t)
    head = stream[:split]
    states = []
    for part in range(3):
        ps = PartialState(texts)
        rows = [(i, t, ev) for i, (t, ev) in enumerate(head)
                if ["a", "b", "c", 1].index(ev["card"]) % 3 == part]
        ts = np.array([t for _, t, _ in rows], dtype=np.int64)
        cols = {f: [ev[f] for _, _, ev in rows] for f in ("card", "merchant", "amount")}
        ps.ingest(ts, cols, [i for i, _, _ in rows])
        states.append(ps.finish(head[-1][0], len(head)))
    d = tmp_path / "assembled"
    prepare(d, texts)
    write_segment(reservoir_dir(d, "payments"), 1, 0, head, chunk_bytes_target=1024)
    ts = np.array([t for t, _ in head])
    times = cursor_times(list(_core_plan(live).cursors), int(ts[0]), int(ts[-1]))
    count_le = dict(zip(times.tolist(), np.searchsorted(ts, times, "right").tolist(), strict=True))
    digest = assemble(d, "payments", states, count_le, int(ts[0]), int(ts[-1]))
    assert digest == live.digest()
    restored = Engine(tmp_path / "restored", **OPTS)
    restored.restore(d)
    for t, ev in stream[split:]:
        assert restored.ingest("payments", ev, t) == live.ingest("payments", ev, t)
    assert restored.digest() == live.digest()
    d2 = tmp_path / "twice"
    prepare(d2, texts)
    write_segment(reservoir_dir(d2, "payments"), 1, 0, head, chunk_bytes_target=1024)
    with pytest.raises(ValueError, match="two of the merged states"):
        assemble(d2, "payments", states + states[:1], count_le, int(ts[0]), int(ts[-1]))
    live.close()
    restored.close()


def _core_plan(eng: Engine):
    return eng._plan.streams["payments"]


def test_windows_restored_into_one_table_then_given_aggregates_stay_exact(tmp_path):
    """A window added after events gets a table of its own; restored, it is defined before
    any event and shares its group's table: both snapshots' buckets merge, and a slot one
    view gains afterwards (held by the other) is filled anew for every view."""
    a_text = ("SELECT SUM(amount) AS s5 FROM payments GROUP BY card "
              "HOPPING 5 SECONDS EVERY 1 SECOND")
    d_text = ("SELECT MAX(amount) AS x9, OLDEST(merchant) AS o9, COUNT(*) AS n9 FROM payments "
              "GROUP BY card HOPPING 9 SECONDS EVERY 1 SECOND")
    more = ("SELECT MAX(amount) AS x5, COUNT(*) AS n5 FROM payments GROUP BY card "
            "HOPPING 5 SECONDS EVERY 1 SECOND")
    stream = [(T0 + i * 100, {"card": "a", "amount": i, "merchant": "m0", "channel": "cp"})
              for i in range(3)] + [(t + 1000, ev) for t, ev in _stream(400, 5)]
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(a_text)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:3]]
    eng.define(d_text)  # its group's table holds events: a table of its own
    got += [eng.ingest("payments", ev, t) for t, ev in stream[3:200]]
    eng.snapshot(tmp_path / "snap")
    b = Engine(tmp_path / "b", **OPTS)
    b.restore(tmp_path / "snap")
    assert b.digest() == eng.digest()
    assert _core(b).key_count() < _core(eng).key_count()  # one table, not two
    b.define(more)
    got_b = [b.ingest("payments", ev, t) for t, ev in stream[200:]]
    defs = {d.name: d for text in (a_text, d_text, more) for d in parse(text)}
    for name, d in defs.items():
        want = expected(d, stream)
        for i, g in enumerate(got if name in ("s5", "x9", "o9", "n9") else []):
            if name in g:
                assert same(g[name], want[i]), (name, i)
        for i, g in enumerate(got_b, start=200):
            assert same(g[name], want[i]), (name, i, g[name], want[i])
    eng.close()
    b.close()


def test_views_over_the_same_buckets_share_their_states_exactly(tmp_path):
    """A key's 2, 5 and 9-second windows (views of one table) over the same closed buckets
    hold one set of window states between them (keyed.rs `roll`: a larger view reads the
    smaller one's), and part when a bucket leaves one of them: every value equals the brute
    force, the held count is the number of distinct windows of two or more buckets, and a
    snapshot taken at each stage restores to the same digest (a shared window is written as
    its own would be) and carries on with the same values and the same sharing."""
    texts = [f"SELECT {AGGS} FROM payments GROUP BY card HOPPING {m} SECONDS EVERY 1 SECOND"
             for m in SIZES]
    defs = [d for text in texts for d in parse(text)]
    # (bucket, amount, merchant, held): the closed buckets in the 2/5/9-second windows at
    # each event are in the comment.
    plan = [
        (0, 5, "m1", 0),         # {} {} {}
        (1, 2.5, "m2", 0),       # {0} {0} {0}: one bucket, its partial
        (2, -3, "m1", 1),        # {0,1} x3: one set of states, shared
        (3, 7.25, None, 2),      # {1,2} {0,1,2} {0,1,2}
        (3, 1e9 + 0.1, "m3", 2),  # the same
        (6, None, "m2", 2),      # {} {1,2,3} {0,1,2,3}: the 9 s window no longer shares
        (12, 40, "m1", 1),       # {} {} {3,6}
        (13, -1, "m2", 1),       # {12} {12} {6,12}
        (14, 6, "m3", 2),        # {12,13} {12,13} {6,12,13}
        (16, 3, "m1", 1),        # {14} {12,13,14} {12,13,14}: 9 s shares again
        (20, 9, None, 1),        # {} {16} {12,13,14,16}
        (22, 1e9 - 0.7, "m4", 1),  # {} {20} {13,14,16,20}
    ]
    stream = [(T0 + b * 1000 + 10 * i, {"card": "a", "amount": amt, "merchant": m,
                                        "channel": "cnp" if i % 2 else "cp"})
              for i, (b, amt, m, _) in enumerate(plan)]
    want = {d.name: expected(d, stream) for d in defs}
    eng = Engine(tmp_path / "e", **OPTS)
    for text in texts:
        eng.define(text)

    def held(e: Engine) -> int:
        return _core(e).held_windows()

    for i, (t, ev) in enumerate(stream):
        got = eng.ingest("payments", ev, t)
        for d in defs:
            assert same(got[d.name], want[d.name][i]), (i, d.name, got[d.name], want[d.name][i])
        assert held(eng) == plan[i][3], i
        eng.snapshot(tmp_path / f"snap{i}")
        other = Engine(tmp_path / f"r{i}", **OPTS)
        other.restore(tmp_path / f"snap{i}")
        assert other.digest() == eng.digest(), i
        check_carries_on(other, stream, i + 1, want, defs, held, [p[3] for p in plan])
        other.close()
    eng.close()


def test_windows_reading_the_same_states_lower_them_once_in_every_path(tmp_path):
    """W2's shape: windows of one group-by with the same aggregates, one after another. When
    an event's windows hold the same closed buckets they read the same states, and their
    values are lowered once and given to each (plan.rs `Output::same_as_prev`); a window with
    other aggregates, or over other buckets, lowers its own. One event per call, batched into
    lists and batched into Arrow columns: every value equals the brute force, and values were
    shared in each path (the counter the old code lacks, and that stays 0 if sharing breaks).
    Columns also come out the same with the batch's key look-ahead off (plan.rs `find_ahead`:
    an id found ahead is checked again when its row comes, after keys were freed)."""
    texts = [f"SELECT {AGGS} FROM payments GROUP BY card HOPPING {m} SECONDS EVERY 1 SECOND"
             for m in SIZES]
    texts.insert(2, "SELECT COUNT(*), SUM(amount), SKEWNESS(amount) FROM payments "
                    "GROUP BY card HOPPING 7 SECONDS EVERY 1 SECOND")
    texts.append(f"SELECT {AGGS} FROM payments GROUP BY card RANGE 9 SECONDS")
    defs = [d for text in texts for d in parse(text)]
    rng = random.Random(11)
    t, stream = T0, []
    for _ in range(300):
        t += rng.choice([0, 150, 700, 1000, 2500, 6000])
        stream.append((t, {"card": rng.choice(["a", "b", "c"]),
                           "merchant": rng.choice(["m1", "m2", "m3", None]),
                           "channel": rng.choice(["cnp", "cp"]),
                           "amount": rng.choice([rng.randrange(-50, 100), None,
                                                 rng.randrange(-10**12, 10**12)])}))
    def typed(rows: list[dict]) -> list[dict]:
        return [{k: (type(v).__name__, v) for k, v in r.items()} for r in rows]

    engines = {}
    for path in ("call", "lists", "arrow", "arrow, no look-ahead"):
        eng = Engine(tmp_path / path.replace(", ", "-"), **OPTS)
        for text in texts:
            eng.define(text)
        engines[path] = eng
    _core(engines["arrow, no look-ahead"]).look_ahead = False
    got_call = [engines["call"].ingest("payments", ev, t) for t, ev in stream]
    check_values(defs, stream, got_call)
    ts = np.array([t for t, _ in stream], dtype=np.int64)
    cols = {f: [ev[f] for _, ev in stream] for f in ("card", "merchant", "channel", "amount")}
    for path in ("lists", "arrow", "arrow, no look-ahead"):
        got, n = {}, len(stream)
        for lo in range(0, n, 64):
            out = engines[path].ingest_many("payments", ts[lo:lo + 64],
                                            {f: c[lo:lo + 64] for f, c in cols.items()},
                                            arrow=path.startswith("arrow"))
            for name, v in out.items():
                got.setdefault(name, []).extend(v if isinstance(v, list) else v.to_pylist())
        rows = [{name: got[name][i] for name in got} for i in range(n)]
        assert typed(rows) == typed(got_call), path
    for path, eng in engines.items():
        assert _core(eng).reused_reads() > 0, path
        assert engines["call"].digest() == eng.digest(), path
        eng.close()
