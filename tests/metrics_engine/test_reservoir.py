"""The reservoir's prefetch against ``trim``: a chunk read in the background is the chunk that
was asked for, even when the read runs while trim is shifting the chunk list (after the list
lost its head, before ``chunk_base`` moved)."""

from __future__ import annotations

from concurrent.futures import Future

from metrics_engine.reservoir import StreamReservoir, Writer


class ReleaseMidTrim(list):
    """The chunk list; deleting its head runs the held reads at once, inside ``trim``."""

    pool: HeldExecutor

    def __delitem__(self, index):
        super().__delitem__(index)
        self.pool.release()


class HeldExecutor:
    """Runs submitted reads only when ``release`` is called (after the test has trimmed)."""

    def __init__(self):
        self.held: list[tuple[Future, object, tuple]] = []

    def submit(self, fn, *args):
        fut: Future = Future()
        self.held.append((fut, fn, args))
        return fut

    def release(self) -> None:
        for fut, fn, args in self.held:
            fut.set_result(fn(*args))
        self.held.clear()


def test_prefetch_reads_the_chunk_asked_for_while_trim_shifts_the_list(tmp_path):
    writer = Writer(fsync=False)
    pool = HeldExecutor()
    res = StreamReservoir(tmp_path / "s", writer, pool, chunk_bytes_target=60)
    try:
        for i in range(40):
            res.append(1000 + i, {"i": i})
        writer.barrier()  # every closed chunk is on disk: chunk() must read it back
        assert len(res.chunks) >= 6
        k = res.chunk_base + 4
        want_first = res.chunks[4].first_pos
        res.prefetch(k)
        assert pool.held, "chunk k comes from disk, so it is prefetched"
        res.chunks = ReleaseMidTrim(res.chunks)
        res.chunks.pool = pool
        res.trim(res.chunks[2].end_pos)  # drops chunks 0..2: the list shifts by three
        writer.barrier()
        assert not pool.held
        events = res.chunk(k)
        assert [ev["i"] for _, ev in events][0] == want_first
        assert res.locate(want_first) == (k, 0)
    finally:
        writer.stop()


def test_heads_never_read_the_disk_in_steady_state(tmp_path, monkeypatch):
    """Every chunk goes to disk while a head still has to pass it; the head walks the rows
    the core lowered and the chunk places it knows, so nothing is read back from disk."""
    from metrics_engine.engine import Engine

    from .streams import METRICS, events

    reads = []
    read = StreamReservoir._read
    monkeypatch.setattr(StreamReservoir, "_read",
                        lambda self, *a: reads.append(a[0]) or read(self, *a))
    eng = Engine(tmp_path / "e", fsync=False, chunk_bytes_target=1024,
                 segment_bytes_max=8 * 1024)
    for m in METRICS[:2]:  # 5-minute windows: their head trails by a few chunks
        eng.define(m)
    for i, (t, ev) in enumerate(events(3000, 5)):
        eng.ingest("payments", ev, t)
        if i % 50 == 0:
            eng.sync()  # chunks leave memory as soon as they are written
    assert eng.positions()["payments"] == 3000
    assert len(eng._plan.streams["payments"].res.chunks) >= 1
    eng.close()
    assert reads == []
