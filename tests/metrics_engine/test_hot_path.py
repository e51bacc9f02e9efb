"""The one-event ingest path's bookkeeping: the reservoir's counters moved natively (the core
clamps late times against them, also after a reopen), the open chunk's tuples kept out of the
cyclic collector's walks, and the writer's grouped fsyncs and zstd levels."""

from __future__ import annotations

import pytest

from metrics_engine import reservoir
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import check_values
from .streams import METRICS, events

OPTS = dict(chunk_bytes_target=1024, segment_bytes_max=8 * 1024)
W1 = METRICS[:2]  # 5-minute sums, counts, maxima by card and averages by merchant


def _defs(texts: list[str]) -> list:
    return [d for t in texts for d in parse(t)]


def _clamped(stream: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    out, last = [], None
    for t, ev in stream:
        last = t if last is None or t > last else last
        out.append((last, ev))
    return out


def _reference(tmp_path, texts, stream) -> tuple[list[dict], str]:
    eng = Engine(tmp_path / "ref", fsync=False, **OPTS)
    for m in texts:
        eng.define(m)
    values = [eng.ingest("payments", ev, t) for t, ev in stream]
    digest = eng.digest()
    eng.close()
    return values, digest


def test_late_events_clamp_to_the_last_time_also_after_a_reopen(tmp_path):
    """Time never goes back: a late event takes the stream's last time, which the core reads
    from the reservoir's counters (after a reopen: from the chunks on disk)."""
    stream = events(600, 5)
    late = [(t - 400_000 if i % 7 == 3 or i == 300 else t, ev)
            for i, (t, ev) in enumerate(stream)]
    assert late[300][0] < late[299][0]
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    for m in W1:
        eng.define(m)
    got = [eng.ingest("payments", ev, t) for t, ev in late[:300]]
    eng.close()
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    assert eng._plan.streams["payments"].res.last_ts == max(t for t, _ in late[:300])
    got += [eng.ingest("payments", ev, t) for t, ev in late[300:]]
    assert eng._plan.streams["payments"].res.last_ts == max(t for t, _ in late)
    eng.close()
    check_values(_defs(W1), _clamped(late), got)


def test_counters_read_and_written_from_python_reach_the_core(tmp_path):
    """The reservoir's attributes are the native counters the core moves."""
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    eng.define(W1[0])
    res = eng._plan.streams["payments"].res
    assert (res.next_pos, res.open_first_pos, res.chunk_base, res.open_bytes,
            res.last_ts) == (0, 0, 0, 0, None)
    stream = events(300, 9)
    for t, ev in stream:
        eng.ingest("payments", ev, t)
    assert res.next_pos == res.counters.next_pos == 300 == eng.positions()["payments"]
    assert res.last_ts == stream[-1][0]
    assert res.open_first_pos == res.next_pos - len(res.open_events)
    assert res.chunk_base + len(res.chunks) == res.open_no
    assert res.open_events  # 300 events of ~80 bytes: the 1 KiB chunk is not empty
    # The open chunk's JSON array: every event's JSON and a comma each, but the last, in [].
    assert res.open_bytes == len(res.open_chunk_state()["events"]) - 1
    assert eng.ingest("payments", *stream[-1][::-1])["n5"] >= 1
    assert res.counters.next_pos == 301
    eng.close()


def test_the_open_chunk_keeps_no_python_object_per_event(tmp_path):
    """One event per call leaves its row None in the chunk (its JSON is the record), so no
    Python object per event lives on and leaving chunks free none; a reader of the open chunk
    or of a closed one not yet on disk gets every event back decoded, containers included,
    and the core goes on appending after such a read."""
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    eng.define(W1[0])
    res = eng._plan.streams["payments"].res
    base = {"card": "c1", "tags": ["a", {"b": [1, 2]}]}
    eng._writer.pause(True)  # closed chunks stay in memory (pending) too
    for i in range(200):
        eng.ingest("payments", dict(base, amount=i), 1_000 * i)
    assert res.open_events and all(x is None for x in res.open_events)
    pending = sorted(res.pending)
    assert len(pending) >= 5 and all(x is None for k in pending for x in res.pending[k])
    assert res.lazy_open and res.counters.json_held
    assert not res._pending_json  # their JSON went to the writer alone
    eng._writer.pause(False)  # a pending chunk's rows are read back from its segment
    want = [(1_000 * i, dict(base, amount=i)) for i in range(200)]
    got = [tuple(x) for k in pending for x in res.chunk(k)] + list(res.chunk(res.open_no))
    assert got == want[len(want) - len(got):]
    assert not res.counters.json_held  # handed to the reservoir for the read
    for i in range(200, 230):  # appended after the read: None again, then read again
        eng.ingest("payments", dict(base, amount=i), 1_000 * i)
    assert res.chunk(res.open_no)[-1] == (229_000, dict(base, amount=229))
    assert eng.query("s5", "c1", 229_000) == sum(range(230))
    eng.close()
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)  # the open chunk went to open.json
    assert eng.ingest("payments", dict(base, amount=1), 230_000)["s5"] == sum(range(230)) + 1
    eng.close()


def test_chunks_queued_together_are_made_durable_together(tmp_path):
    """A writer behind ingest writes every queued chunk and then fsyncs once per file (fewer
    fsyncs than chunks); a chunk counts as durable only after; a crash then loses nothing
    written and the re-fed engine ends with the digest of one fed straight through."""
    stream = events(1000, 3)
    want, want_digest = _reference(tmp_path, METRICS, stream)
    eng = Engine(tmp_path / "e", **OPTS)  # fsync on
    for m in METRICS:
        eng.define(m)
    eng._writer.pause(True)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:500]]
    assert eng.durable_positions()["payments"] == 0
    before = eng._writer.stats()
    eng._writer.pause(False)
    eng.sync()
    after = eng._writer.stats()
    chunks = after["chunks"] - before["chunks"]
    assert chunks >= 20
    assert 1 <= after["fsyncs"] - before["fsyncs"] < chunks
    res = eng._plan.streams["payments"].res
    assert eng.durable_positions()["payments"] == res.open_first_pos > 0
    eng._shutdown()  # a crash: no states, no open chunk written, engine.json not clean
    eng = Engine(tmp_path / "e", **OPTS)
    durable = eng.durable_positions()["payments"]
    assert durable == res.open_first_pos
    got = got[:durable] + [eng.ingest("payments", ev, t) for t, ev in stream[durable:]]
    assert got == want
    assert eng.digest() == want_digest
    eng.close()


@pytest.mark.parametrize("first,then", [(1, -5), (-5, 1)])
def test_chunks_of_any_zstd_level_read_back(tmp_path, monkeypatch, first, then):
    """Segments written at one zstd level (format 4's files were level 1) are read back by a
    writer of another: a crash recovery replays them from disk, and the values equal the
    brute force's and the digest an engine's fed straight through."""
    stream = events(1000, 4)
    want, want_digest = _reference(tmp_path, METRICS, stream)
    monkeypatch.setattr(reservoir, "ZSTD_LEVEL", first)
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    for m in METRICS:
        eng.define(m)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:600]]
    eng.sync()
    eng._shutdown()  # a crash after the writer caught up
    monkeypatch.setattr(reservoir, "ZSTD_LEVEL", then)
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    durable = eng.durable_positions()["payments"]
    assert 0 < durable <= 600
    got = got[:durable] + [eng.ingest("payments", ev, t) for t, ev in stream[durable:]]
    eng.close()
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)  # a clean reopen reads both levels
    assert eng.positions()["payments"] == len(stream)
    assert eng.digest() == want_digest
    eng.close()
    assert got == want
    check_values(_defs(METRICS[:2]), stream, got)


def test_values_are_the_same_with_and_without_asking_for_the_event_first(tmp_path):
    """Prefetching an event's values (a hint, on by default) changes nothing read."""
    stream = events(800, 6)
    got = {}
    for on in (True, False):
        eng = Engine(tmp_path / str(on), fsync=False, **OPTS)
        for m in METRICS:
            eng.define(m)
        eng._plan.streams["payments"].core.prefetch_events = on
        got[on] = ([eng.ingest("payments", ev, t) for t, ev in stream], eng.digest())
        eng.close()
    assert got[True] == got[False]
    check_values(_defs(W1), stream, got[True][0])
