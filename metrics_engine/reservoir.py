"""The event reservoir: per stream, events in chunks; closed chunks compressed on disk.

Events go into an open in-memory chunk. The native core (``StreamCore.ingest`` and
``ingest_arrays``) appends only their JSON (or, for a chunk a batch fills whole, its columnar
frame): their rows are None in the chunk's list until a
reader asks for the chunk, which decodes them in place (``_fill``; the open chunk's JSON is
asked of the core first, ``hand_off``), and a closed chunk not yet on disk is read back from its
segment once the writer placed it (``_pending_events``). ``append`` keeps (ts, event) rows, in
Python, when a stream is reopened. When its serialized size reaches ``chunk_bytes_target`` the
chunk closes, becomes immutable, and the native writer thread (``Writer``; it never takes the
GIL, and queuing work for it wakes no thread) compresses it (zstd) and appends it to the
stream's current segment file (which rolls at ``segment_bytes_max``), then fsyncs. The
open-chunk counters (``next_pos``, ``last_ts``, ...) live in a native ``Counters`` object the
core moves at every event. Readers never wait for the disk in steady state (the core reads its
own lowered rows) and asynchronous writes never change what they read.

Readers (``Cursor`` in plan.py) walk chunks in order by number and ask for the next chunk to be
prefetched by a background thread before they need it. ``trim(floor)`` forgets chunks that end
at or before ``floor`` (the oldest position any window still needs) and deletes segment files
made only of such chunks.

After a crash, ``StreamReservoir.open`` reads back every intact chunk, truncates a torn tail and
reports ``durable_pos``: the caller re-feeds the events from there on.

On-disk record: header ``<4sQIII`` (magic, first position, event count, payload bytes,
crc32 of the payload), then the zstd-compressed payload: with magic ``RFC1`` the JSON array
``[[ts, event], ...]``; with ``RFC2`` a columnar frame (native ``frame.rs``: a chunk whose rows
all came from one batch of typed columns, its buffers sliced in as they are, no JSON made),
which ``decode_columns`` reads back to the events the JSON would give. Both read everywhere.
The caller must pass JSON-like events (str, int, float, bool, None, lists, dicts with str keys);
tuples come back as lists.
"""

from __future__ import annotations

import bisect
import operator
import os
import shutil
import struct
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import zstandard
from railflow_metrics_native import Counters, NativeWriter, decode_columns

from metrics_engine.errors import InvariantViolation

CHUNK_BYTES_TARGET = 64 * 1024
SEGMENT_BYTES_MAX = 64 * 1024 * 1024
PENDING_CHUNKS_MAX = 256  # closed chunks waiting for the writer before ingest blocks
DECODED_CHUNKS_MAX = 64  # decoded chunks kept for readers that share a chunk
# zstd's level for closed chunks: a fast mode, since the writer thread's CPU counts in the CPU
# per event (W1 batched: the writer's ~0.3-0.4 CPU us per event at level 1, ~0.24-0.33 at -3,
# NOISY; chunks ~30 % larger on disk). Readers take frames of any level.
ZSTD_LEVEL = -3

HEADER = struct.Struct("<4sQIII")
MAGIC = b"RFC1"  # the payload is a JSON array
MAGIC_COLUMNS = b"RFC2"  # the payload is a columnar frame (native frame.rs)


def decode_payload(payload: bytes) -> list:
    """A chunk's uncompressed payload (a JSON array or a columnar frame) as its rows
    ``[[ts, event], ...]``."""
    return orjson.loads(payload) if payload[:1] == b"[" else decode_columns(payload)


def _fill(events: list, payload: bytes) -> None:
    """Decode, in place, the rows of a chunk that the batched path left as None (the native
    core appends a batch's rows with their JSON or frame only; see ``StreamCore.ingest_arrays``)."""
    for i, (ts, ev) in enumerate(decode_payload(payload)):
        if events[i] is None:
            events[i] = (ts, ev)


class ChunkMeta:
    """Where a closed chunk lives. ``segment``/``offset`` are set once it is durable."""

    __slots__ = ("first_pos", "count", "segment", "offset", "length")

    def __init__(self, first_pos: int, count: int, segment: int = -1, offset: int = -1,
                 length: int = -1):
        self.first_pos = first_pos
        self.count = count
        self.segment = segment
        self.offset = offset
        self.length = length

    @property
    def end_pos(self) -> int:
        return self.first_pos + self.count


def _segment_path(directory: Path, segment: int) -> Path:
    return directory / f"seg-{segment:010d}.rfs"


def write_segment(directory: Path, segment: int, first_pos: int,
                  events: Iterable[tuple[int, Mapping[str, Any]]], *,
                  chunk_bytes_target: int = CHUNK_BYTES_TARGET) -> int:
    """Write the events at positions ``first_pos``, ``first_pos + 1``, ... of a stream as
    segment file number ``segment`` of ``directory``, in closed chunks of about
    ``chunk_bytes_target`` (the records the writer thread appends). Several segments covering
    consecutive ranges, numbered in position order, make a reservoir ``open`` reads back; a
    stream's ranges can thus be written in parallel. Returns the events written (none: no
    file)."""
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    path = _segment_path(directory, segment)
    tmp = path.with_suffix(".tmp")
    count, blobs, size, chunk_first = 0, [], 0, first_pos
    directory.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        def flush() -> None:
            payload = compressor.compress(b"[" + b",".join(blobs) + b"]")
            f.write(HEADER.pack(MAGIC, chunk_first, len(blobs), len(payload),
                                zlib.crc32(payload)) + payload)

        for ts, event in events:
            blob = orjson.dumps([ts, event])
            blobs.append(blob)
            size += len(blob) + 1
            count += 1
            if size >= chunk_bytes_target:
                flush()
                chunk_first, blobs, size = first_pos + count, [], 0
        if blobs:
            flush()
    if count:
        os.replace(tmp, path)
    else:
        tmp.unlink()
    return count


class Writer:
    """The engine's disk writer: one native thread (``NativeWriter``) compresses, appends and
    fsyncs closed chunks in order and deletes passed segments, without the GIL, so ingest
    never waits for it; reservoirs collect where their chunks landed (``_drain``)."""

    def __init__(self, *, fsync: bool = True):
        self.fsync = fsync
        self.native = NativeWriter(fsync, PENDING_CHUNKS_MAX, ZSTD_LEVEL)

    def check(self) -> None:
        error = self.native.error()
        if error is not None:
            raise InvariantViolation(f"reservoir writer failed: {error}")

    def barrier(self, roll: bool = False) -> None:
        """Wait until everything submitted so far is durable; ``roll`` closes open segments."""
        self.native.barrier(roll)
        self.check()

    def stats(self) -> dict[str, int]:
        """The thread's work so far: chunks, fsyncs, bytes in and out, wall nanoseconds in
        compression, writes and fsyncs, wakeups, its CPU time (``cpu_ns``) and thread id."""
        return self.native.stats()

    def pause(self, paused: bool) -> None:
        """Hold the thread before its next item (tests: a writer lagging behind ingest)."""
        self.native.pause(paused)

    def stop(self) -> None:
        self.native.stop()


def _counter(name: str, doc: str) -> property:
    """An attribute kept in the reservoir's ``Counters`` (native, shared with the core)."""

    def put(self: StreamReservoir, value: Any) -> None:
        setattr(self.counters, name, value)

    return property(operator.attrgetter(f"counters.{name}"), put, doc=doc)


class StreamReservoir:
    """The chunks of one stream. Memory-only when ``directory`` is None (offline use).

    The open chunk's counters live in a native ``Counters`` object that the stream's native
    core moves at every event without a Python attribute call; here they read as attributes.
    """

    next_pos = _counter("next_pos", "The position the next event gets.")
    open_first_pos = _counter("open_first_pos", "The open chunk's first position.")
    chunk_base = _counter("chunk_base", "The number of the first retained closed chunk.")
    open_bytes = _counter("open_bytes", "The open chunk's JSON size (bytes, with commas).")
    last_ts = _counter("last_ts", "The last event's time (None before any event).")
    lazy_open = _counter("lazy", "The open chunk has None rows (decoded from its JSON when read).")

    def __init__(self, directory: Path | None, writer: Writer | None,
                 prefetcher: ThreadPoolExecutor | None, *, first_pos: int = 0,
                 chunk_bytes_target: int = CHUNK_BYTES_TARGET,
                 segment_bytes_max: int = SEGMENT_BYTES_MAX):
        self.directory = directory
        self.writer = writer
        self.prefetcher = prefetcher
        self.chunk_bytes_target = chunk_bytes_target
        self.segment_bytes_max = segment_bytes_max
        self.counters = Counters(first_pos)
        self.chunks: list[ChunkMeta] = []  # closed chunks still retained; number = base + index
        self.pending: dict[int, list] = {}  # closed chunks not yet durable (or memory mode)
        self._pending_json: dict[int, bytes] = {}  # a pending chunk's JSON, while rows are None
        self.decoded: OrderedDict[int, list] = OrderedDict()
        self.fetching: dict[int, Future] = {}
        self.open_events: list = []
        self.open_blobs: list[bytes] = []
        self._closed_blobs: list[bytes] | None = None
        # The native core keeps the JSON of the open chunk's events it appended and gives it
        # to ``open_blobs`` when asked (``StreamCore.hand_off``; set by plan.py).
        self.hand_off: Callable[[], None] | None = None
        self._durable_pos = first_pos
        self._trim_floor_sent = -1  # the largest floor handed to the writer for deletion
        # The segments found on disk, handed to the writer when the stream first writes.
        self._seg_id = 0
        self._seg_end: dict[int, int] = {}  # segment -> end position of its last chunk
        self._sid: int | None = None  # the stream's id in the writer

    @property
    def durable_pos(self) -> int:
        self._drain()
        return self._durable_pos

    def _writer_id(self) -> int:
        if self._sid is None:
            self._sid = self.writer.native.register(self.directory, self._seg_id,
                                                    self._seg_end, self.segment_bytes_max)
        return self._sid

    def _drain(self) -> None:
        """Take the places of the chunks the writer has written since the last call."""
        if self._sid is None:
            return
        base = self.counters.chunk_base
        for k, seg, offset, length, end in self.writer.native.take_done(self._sid):
            meta = self.chunks[k - base]  # trim keeps chunks not yet placed
            meta.segment, meta.offset, meta.length = seg, offset, length
            self._durable_pos = end
            self.pending.pop(k, None)
            self._pending_json.pop(k, None)

    # -- writing (ingest thread) ---------------------------------------------------------
    @property
    def open_no(self) -> int:
        return self.chunk_base + len(self.chunks)

    def append(self, ts: int, event: Mapping[str, Any]) -> int:
        """Append one event; returns its position."""
        blob = orjson.dumps([ts, event])
        self.open_events.append((ts, event))
        self.open_blobs.append(blob)
        self.open_bytes += len(blob) + 1
        pos = self.next_pos
        self.next_pos = pos + 1
        self.last_ts = ts
        if self.open_bytes >= self.chunk_bytes_target:
            self.close_open()
        return pos

    def close_open(self, json: bytes | None = None, native: bool = False) -> tuple | None:
        """Close the open chunk. ``native``: the core built the chunk's JSON array and hands it
        to the writer itself (``json`` is a copy, given when the chunk holds rows left as
        None): returns (writer stream id, chunk number, first position, count) when the chunk
        goes to disk."""
        if not self.open_events:
            return None
        # The counters read and set directly (not through the properties): this runs at
        # every chunk's close, inside one event's latency.
        c = self.counters
        k = c.chunk_base + len(self.chunks)
        meta = ChunkMeta(c.open_first_pos, len(self.open_events))
        self.pending[k] = self.open_events
        self.chunks.append(meta)
        payload: bytes | list[bytes] = self.open_blobs  # the writer joins them (one copy)
        if c.lazy:  # rows left None: decoded when a reader asks
            if json is None and not native:
                json = b"[" + b",".join(self.open_blobs) + b"]"
            if json is not None:  # else (native, on disk) read back from the segment
                payload = self._pending_json[k] = json
            c.lazy = False
        c.open_first_pos = c.next_pos
        # The closed chunk's blobs are freed at the next trim (the next event), not now: a
        # chunk's bookkeeping is spread over two events.
        self._closed_blobs = self.open_blobs
        self.open_events, self.open_blobs = [], []
        c.open_bytes = 0
        if self.writer is not None and self.directory is not None:
            self.writer.check()
            if native:
                return self._writer_id(), k, meta.first_pos, meta.count
            self.writer.native.chunk(self._writer_id(), k, meta.first_pos, meta.count, payload)
        return None

    def trim(self, floor: int) -> None:
        """Forget closed chunks ending at or before ``floor``; their segments go later."""
        self._closed_blobs = None
        self._drain()
        n = 0
        chunks = self.chunks
        while n < len(chunks) and chunks[n].end_pos <= floor:
            if chunks[n].segment < 0 and self.directory is not None:
                break  # not durable yet: keep it until the writer has placed it
            n += 1
        c = self.counters
        base = c.chunk_base
        if n:
            pending, pending_json, decoded, fetching = (self.pending, self._pending_json,
                                                        self.decoded, self.fetching)
            for k in range(base, base + n):
                pending.pop(k, None)
                pending_json.pop(k, None)
                decoded.pop(k, None)
                fetching.pop(k, None)
            del chunks[:n]
            c.chunk_base = base + n
        # Segment deletion is decided on the writer thread, after every chunk submitted so far
        # is placed: a writer that lags behind ingest must still delete what the floor passed,
        # so the floor goes to it even when no chunk could leave memory yet.
        if (self.writer is not None and self.directory is not None
                and floor > self._trim_floor_sent):
            self._trim_floor_sent = floor
            self.writer.native.trim(self._writer_id(), floor)

    # -- reading -------------------------------------------------------------------------
    def first_pos(self) -> int:
        return self.chunks[0].first_pos if self.chunks else self.open_first_pos

    def locate(self, pos: int) -> tuple[int, int]:
        """(chunk number, index in chunk) of a retained position."""
        if pos >= self.open_first_pos:
            return self.open_no, pos - self.open_first_pos
        firsts = [c.first_pos for c in self.chunks]
        i = bisect.bisect_right(firsts, pos) - 1
        if i < 0:
            raise InvariantViolation(f"position {pos} is older than the reservoir keeps")
        return self.chunk_base + i, pos - self.chunks[i].first_pos

    def chunk(self, k: int) -> list:
        """The events of chunk number ``k`` as a list of (ts, event)."""
        if k == self.open_no:
            if self.lazy_open:
                if self.counters.json_held and self.hand_off is not None:
                    self.hand_off()  # the JSON of the rows the native core appended
                _fill(self.open_events, b"[" + b",".join(self.open_blobs) + b"]")
                self.lazy_open = False
            return self.open_events
        self._drain()
        events = self.pending.get(k)
        if events is not None:
            return self._pending_events(k, events)
        events = self.decoded.get(k)
        if events is not None:
            self.decoded.move_to_end(k)
            return events
        fut = self.fetching.pop(k, None)
        events = fut.result() if fut is not None else self._read(k)
        self.decoded[k] = events
        if len(self.decoded) > DECODED_CHUNKS_MAX:
            self.decoded.popitem(last=False)
        return events

    def _pending_events(self, k: int, events: list) -> list:
        payload = self._pending_json.pop(k, None)
        if payload is not None:
            _fill(events, payload)
        elif self.writer is not None and self.directory is not None and None in events:
            # Rows whose JSON the native core handed to the writer alone: read back from the
            # segment once durable (rare: the core reads its own lowered rows).
            self.writer.barrier()
            self._drain()
            return self._read(k)
        return events

    def prefetch(self, k: int) -> None:
        """Start reading chunk ``k`` in the background if it will come from disk."""
        self._drain()
        if (self.prefetcher is None or k >= self.open_no or k < self.chunk_base
                or k in self.pending or k in self.decoded or k in self.fetching):
            return
        # The meta is taken here, on the ingest thread: ``trim`` may shift ``chunks`` while the
        # prefetch thread runs, so it must not index the list itself.
        self.fetching[k] = self.prefetcher.submit(self._read, k, self.chunks[k - self.chunk_base])

    def _read(self, k: int, meta: ChunkMeta | None = None) -> list:
        if meta is None:
            meta = self.chunks[k - self.chunk_base]
        events = self.pending.get(k)  # written but raced with the lookup above
        if events is not None:
            return self._pending_events(k, events)
        if self.directory is None:
            raise InvariantViolation(f"chunk {k} of a memory-only reservoir is gone")
        with open(_segment_path(self.directory, meta.segment), "rb") as f:
            f.seek(meta.offset)
            record = f.read(meta.length)
        magic, first, count, size, crc = HEADER.unpack_from(record)
        payload = record[HEADER.size:]
        if (magic not in (MAGIC, MAGIC_COLUMNS) or first != meta.first_pos
                or zlib.crc32(payload) != crc):
            raise InvariantViolation(f"chunk {k} at {meta.first_pos} is corrupt on disk")
        data = zstandard.ZstdDecompressor().decompress(payload)
        return orjson.loads(data) if magic == MAGIC else decode_columns(data)

    # -- persistence ---------------------------------------------------------------------
    def open_chunk_state(self) -> dict:
        """The open chunk, for a clean close or a snapshot (it is not on disk yet)."""
        if self.hand_off is not None:
            self.hand_off()  # the JSON of the events the native core appended
        return {"first_pos": self.open_first_pos,
                "events": b"[" + b",".join(self.open_blobs) + b"]"}

    def copy_segments(self, dest: Path) -> None:
        """Hard-link (or copy) every segment file into ``dest``; the writer must be idle."""
        dest.mkdir(parents=True, exist_ok=True)
        if self.directory is None or not self.directory.exists():
            return
        for path in sorted(self.directory.glob("seg-*.rfs")):
            try:
                os.link(path, dest / path.name)
            except OSError:
                shutil.copy2(path, dest / path.name)

    @classmethod
    def open(cls, directory: Path, writer: Writer, prefetcher: ThreadPoolExecutor,
             open_chunk: dict | None = None, **kw) -> StreamReservoir:
        """Reopen a stream: every intact chunk on disk, then ``open_chunk`` if given."""
        res = cls(directory, writer, prefetcher, **kw)
        paths = sorted(directory.glob("seg-*.rfs")) if directory.exists() else []
        broken = False
        for path in paths:
            seg = int(path.stem.split("-")[1])
            if broken:
                path.unlink()
                continue
            data = path.read_bytes()
            off = 0
            while off < len(data):
                ok = off + HEADER.size <= len(data)
                if ok:
                    magic, first, count, size, crc = HEADER.unpack_from(data, off)
                    end = off + HEADER.size + size
                    ok = (magic in (MAGIC, MAGIC_COLUMNS) and end <= len(data)
                          and zlib.crc32(data[off + HEADER.size:end]) == crc
                          and (not res.chunks or first == res.chunks[-1].end_pos))
                if not ok:  # a torn write: keep what came before it
                    with open(path, "r+b") as f:
                        f.truncate(off)
                    broken = True
                    break
                res.chunks.append(ChunkMeta(first, count, seg, off, HEADER.size + size))
                res._seg_end[seg] = first + count
                off = end
            res._seg_id = max(res._seg_id, seg)
        if res.chunks:
            res.open_first_pos = res.next_pos = res._durable_pos = res.chunks[-1].end_pos
            last = res.chunk(res.open_no - 1)
            res.last_ts = last[-1][0]
        elif open_chunk is not None:
            res.open_first_pos = res.next_pos = res._durable_pos = open_chunk["first_pos"]
        if open_chunk is not None and open_chunk["first_pos"] == res.next_pos:
            for ts, ev in orjson.loads(open_chunk["events"]):
                res.append(ts, ev)
        return res
