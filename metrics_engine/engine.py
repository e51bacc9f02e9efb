"""``Engine``: the embedded metrics engine over a data directory.

Layout of ``data_dir``: ``engine.json`` (metrics, windows' start positions, cursor positions,
``clean`` flag), ``reservoir/<stream>/seg-*.rfs`` (closed chunks) and, after a clean close or in
a snapshot, ``reservoir/<stream>/open.json`` (the open chunk) and ``state/<stream>.bin`` (the
native core's aggregation state, ordered by canonical key). A snapshot directory has exactly
this layout, so ``restore`` copies it in and reopens.

After a crash (``clean`` false), the engine keeps the metric definitions, reopens every intact
chunk, rebuilds the aggregation state by replaying the retained events and reports
``durable_positions()``: the caller re-feeds each stream's events from that position on.

The caller must call ``ingest`` from one thread, in log order. Determinism: values depend only
on the definitions and the sequence of ``(stream, event, ts)``; asynchronous chunk writes,
cache evictions, chunk layout and crashes do not change them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from metrics_engine.errors import InvariantViolation
from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import CHUNK_BYTES_TARGET, SEGMENT_BYTES_MAX, StreamReservoir, Writer

# 2: aggregation state in native files; 3: calendar windows hold bucket rings; 4: NaN and
# infinities kept as null in the reservoir, group tables sharing interned keys per group-by;
# 5: a reservoir chunk may be an ``RFC2`` columnar frame (reservoir.py), not only ``RFC1``
# JSON. An engine of format 4 took a frame for a torn write and truncated the segment there:
# it now refuses a directory or snapshot of format 5 instead. This engine writes
# ``FORMAT_VERSION`` from the moment it opens a directory (a frame may follow at any batch)
# and reads every format in ``FORMATS_READ`` (a format-4 directory holds JSON chunks only,
# and its state files are those of format 5).
FORMAT_VERSION = 5
FORMATS_READ = (4, 5)
CACHE_ENTRIES_MAX = 500_000  # kept for callers; the native core does not spill yet
STREAM_NAME_CHARS_MAX = 100
CAPTURES_DIR = ".captures"  # in data_dir: a capture's segment links until it is written
# False: a capture encodes the native states on the capturing thread (``StreamCore.dump``), as
# before ``StreamCore.freeze`` (bench/checkpoint_pause.py's A/B switch).
CAPTURE_FROZEN = True


def _check_format(meta: dict, path: Path) -> None:
    """Refuse engine files of a format this engine does not read (a newer one's chunks or
    state, read as this one's, would be wrong or look torn and be truncated)."""
    if meta.get("version") not in FORMATS_READ:
        raise InvariantViolation(
            f"{path} is engine format {meta.get('version')!r}, this engine reads formats "
            f"{', '.join(map(str, FORMATS_READ))} only: use the engine that wrote it, or "
            f"define the metrics again in an empty directory and replay the events")


@dataclass(frozen=True)
class MetricInfo:
    name: str
    text: str
    stream: str


def _stream_dir(stream: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_\-]+", stream) and len(stream) <= STREAM_NAME_CHARS_MAX:
        return stream
    return "x" + stream.encode().hex()[:2 * STREAM_NAME_CHARS_MAX]


def _open_json(open_chunk: dict) -> bytes:
    """``open.json``: the open chunk's first position and its events' JSON array as text."""
    return orjson.dumps({"first_pos": open_chunk["first_pos"],
                         "events": open_chunk["events"].decode()})


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Engine:
    """Exact sliding-window metrics over an on-disk reservoir.

    Aggregation state lives in the native core's memory and is written to ``state/`` at a
    clean close or a snapshot; ``cache_entries_max`` is accepted for compatibility and no
    longer bounds it (there is no spill to RocksDB yet).

    >>> import tempfile
    >>> e = Engine(tempfile.mkdtemp())
    >>> e.define("SELECT SUM(amount) AS s5, COUNT(*) AS n5 FROM payments "
    ...          "GROUP BY card RANGE 5 MINUTES")
    ['s5', 'n5']
    >>> e.ingest("payments", {"card": "c1", "amount": 700}, 0)
    {'s5': 700, 'n5': 1}
    >>> e.ingest("payments", {"card": "c1", "amount": 300}, 240_000)
    {'s5': 1000, 'n5': 2}
    >>> e.ingest("payments", {"card": "c1", "amount": 50}, 300_000)  # the first one left
    {'s5': 350, 'n5': 2}
    >>> e.query("n5", "c1", 600_000)
    0
    >>> e.close()
    """

    def __init__(self, data_dir: str | Path, *, chunk_bytes_target: int = CHUNK_BYTES_TARGET,
                 segment_bytes_max: int = SEGMENT_BYTES_MAX,
                 cache_entries_max: int = CACHE_ENTRIES_MAX, fsync: bool = True):
        self.data_dir = Path(data_dir)
        self._opts = dict(chunk_bytes_target=chunk_bytes_target,
                          segment_bytes_max=segment_bytes_max)
        self._cache_entries_max = cache_entries_max
        self._fsync = fsync
        self._closed = True
        self._open()

    # -- lifecycle -----------------------------------------------------------------------
    def _open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        meta_path = self.data_dir / "engine.json"
        meta = orjson.loads(meta_path.read_bytes()) if meta_path.exists() else None
        if meta is not None:
            _check_format(meta, meta_path)
        clean = meta is None or meta.get("clean", False)
        if not clean:
            shutil.rmtree(self.data_dir / "state", ignore_errors=True)
        # Segment links of captures never written (a crash between capture and write).
        shutil.rmtree(self.data_dir / CAPTURES_DIR, ignore_errors=True)
        self._captures = 0
        self._writer = Writer(fsync=self._fsync)
        self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        streams_meta = (meta or {}).get("streams", {})

        def make_reservoir(stream: str) -> StreamReservoir:
            sdir = self.data_dir / "reservoir" / _stream_dir(stream)
            sm = streams_meta.get(stream, {})
            open_chunk = None
            open_path = sdir / "open.json"
            if clean and open_path.exists():
                oc = orjson.loads(open_path.read_bytes())
                open_chunk = {"first_pos": oc["first_pos"], "events": oc["events"].encode()}
            if open_path.exists():
                open_path.unlink()  # from now on the open chunk lives in memory only
            return StreamReservoir.open(sdir, self._writer, self._prefetcher,
                                        open_chunk=open_chunk,
                                        first_pos=sm.get("durable_pos", 0), **self._opts)

        self._plan = Plan(make_reservoir)
        self._closed = False
        if meta is not None:
            self._load_plan(meta, clean)
        self._save_meta(clean=False)

    def _load_plan(self, meta: dict, clean: bool) -> None:
        from metrics_engine.plan import StreamPlan

        plan = self._plan
        for m in meta["metrics"]:
            d = next(x for x in parse(m["text"]) if x.name == m["name"])
            if d.stream not in plan.streams:
                plan.streams[d.stream] = StreamPlan(d.stream, plan.make_reservoir(d.stream))
            first = plan.streams[d.stream].res.first_pos()
            plan.add(d, recovery=(m["window_start"], first))
        for stream, sp in plan.streams.items():
            sm = meta["streams"].get(stream, {})
            if clean:
                for spec_text, pos in sm.get("cursors", []):
                    sp.cursors[tuple(orjson.loads(spec_text))].seek(pos)
                state = self.data_dir / "state" / f"{_stream_dir(stream)}.bin"
                if state.exists():
                    sp.core.load(state.read_bytes())
            else:
                plan.replay(stream, sp.res.first_pos(), sp.res.next_pos)

    def _meta_bytes(self, *, clean: bool, durable: Mapping[str, int] | None = None) -> bytes:
        """``engine.json``; ``durable``: each stream's ``durable_pos`` to write instead of the
        reservoir's own (a capture's, as the writer will have it once its queue landed)."""
        metrics = [{"name": m.d.name, "text": m.d.text, "window_start": m.window.start_pos}
                   for m in self._plan.metrics.values()]
        streams = {}
        for name, sp in self._plan.streams.items():
            streams[name] = {
                "dir": _stream_dir(name),
                "durable_pos": sp.res.durable_pos if durable is None else durable[name],
                "next_pos": sp.res.next_pos,
                "cursors": [[orjson.dumps(list(c.spec)).decode(), c.pos]
                            for c in sp.cursors.values()],
            }
        return orjson.dumps({"version": FORMAT_VERSION, "clean": clean, "metrics": metrics,
                             "streams": streams}, option=orjson.OPT_INDENT_2)

    def _save_meta(self, *, clean: bool, dest: Path | None = None) -> None:
        _write_atomic((dest or self.data_dir) / "engine.json", self._meta_bytes(clean=clean))

    def _write_states(self, dest: Path) -> None:
        sdir = dest / "state"
        sdir.mkdir(parents=True, exist_ok=True)
        for name, sp in self._plan.streams.items():
            _write_atomic(sdir / f"{_stream_dir(name)}.bin", sp.core.dump())

    def _write_open_chunks(self, dest: Path) -> None:
        for name, sp in self._plan.streams.items():
            sdir = dest / "reservoir" / _stream_dir(name)
            sdir.mkdir(parents=True, exist_ok=True)
            _write_atomic(sdir / "open.json", _open_json(sp.res.open_chunk_state()))

    def close(self) -> None:
        """Write everything down and stop; a later ``Engine(data_dir)`` resumes exactly."""
        if self._closed:
            return
        self._writer.barrier(roll=True)
        self._write_open_chunks(self.data_dir)
        self._write_states(self.data_dir)
        self._save_meta(clean=True)
        self._shutdown()

    def _shutdown(self) -> None:
        self._writer.stop()  # makes the links of every capture queued before
        self._prefetcher.shutdown(wait=True)
        shutil.rmtree(self.data_dir / CAPTURES_DIR, ignore_errors=True)
        self._closed = True

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metrics -------------------------------------------------------------------------
    def define(self, text: str) -> list[str]:
        """Add the metrics of one definition; returns their names. Raises MetricSyntaxError.

        Re-defining a metric with the same name and the same meaning is a no-op."""
        defs = parse(text)
        for d in defs:
            old = self._plan.metrics.get(d.name)
            if old is not None and old.d != d:
                raise ValueError(f"metric {d.name!r} already exists with another definition")
        for d in defs:
            if d.name not in self._plan.metrics:
                self._plan.add(d)
        self._save_meta(clean=False)
        return [d.name for d in defs]

    def drop(self, name: str) -> None:
        if name not in self._plan.metrics:
            raise KeyError(f"no metric named {name!r}")
        self._plan.remove(name)
        self._save_meta(clean=False)

    def metrics(self) -> list[MetricInfo]:
        return [MetricInfo(m.d.name, m.d.text, m.d.stream) for m in self._plan.metrics.values()]

    def explain(self) -> str:
        return self._plan.explain()

    # -- events --------------------------------------------------------------------------
    def ingest(self, stream: str, event: Mapping[str, Any], ts_ms: int) -> dict[str, Any]:
        """Feed one event; returns the value of every metric of ``stream`` for it.

        ``ts_ms`` older than the stream's last one is clamped to it: time never goes back, so
        windows only move forward and every replica computes the same values."""
        if type(ts_ms) is not int:
            ts_ms = int(ts_ms)
        # Plan.ingest inlined (one Python call less per event); the core clamps ts_ms.
        sp = self._plan.streams.get(stream)
        if sp is None:
            return {}
        return sp.core.ingest(event, ts_ms)

    def ingest_by_name(self, stream: str, event: Mapping[str, Any], ts_ms: int) -> dict[str, Any]:
        """``ingest``, its values in the sorted order of the metric names: the same dict as
        ``{k: v[k] for k in sorted(v)}`` of ``ingest``'s, made natively (with W1's 240 values
        the sort and the copy in Python cost twice the event's ingest)."""
        if type(ts_ms) is not int:
            ts_ms = int(ts_ms)
        sp = self._plan.streams.get(stream)
        if sp is None:
            return {}
        return sp.core.ingest(event, ts_ms, True)

    def ingest_many(self, stream: str, ts_ms: Any, columns: Any, *,
                    arrow: bool = False) -> dict[str, Any]:
        """Feed a batch of events given as columns; returns each metric's values as a column.

        ``columns`` is a ``pyarrow.Table`` / ``RecordBatch`` or a mapping of field name to an
        Arrow or numpy array (or list); ``ts_ms`` is one timestamp per row (an array or list).
        The values are exactly those ``ingest`` would give event by event (same clamping);
        ``pyarrow.table(result)`` makes a table of them. Every row is checked before any is
        ingested: a refused row raises ``MetricInputError`` whose ``index`` is its row, and
        nothing of the batch goes in (fix or drop that row and feed the batch again).

        Integer, float, boolean and string columns (Arrow or numpy) are read natively, with
        no Python object per row, whenever every WHERE/RATIO predicate of the stream lowers
        (comparisons with a literal, IN, IS NULL, NOT, AND, OR); with arithmetic in a
        predicate, each row becomes a dict for the Python closures (same values, slower).

        Each column is a list, or with ``arrow=True`` a ``pyarrow`` array (no Python object
        per value) whose type depends on the metric and its field's type in the batch, never
        on the values: int64 for COUNT, COUNT DISTINCT, TIME_SINCE_LAST and a SUM of an
        integer or boolean field; float64 for AVG, the variances and deviations, SKEWNESS,
        RATIO and a SUM of anything else; the field's own type (int64, float64, bool, string)
        for MIN, MAX, OLDEST and RECENT. A field given as a list is typed as pyarrow would type
        it (ints with floats: float64); a field the batch lacks or gives all-null keeps the
        type of its last batch. Values are exact: an int goes into a float64 column only if
        the float equals it, a float into an int64 column only if it is integral; a value that
        does not fit (a SUM beyond 64 bits, a field whose type changed while its old values
        are still in a window) raises ``MetricOutputError`` *after* the batch went in, with
        every value of the batch exact, as lists, in its ``values``.

        >>> import tempfile, numpy as np
        >>> e = Engine(tempfile.mkdtemp())
        >>> e.define("SELECT SUM(amount) AS s FROM p GROUP BY card RANGE 1 MINUTES")
        ['s']
        >>> e.ingest_many("p", np.array([0, 30_000, 70_000]),
        ...               {"card": np.array(["a", "a", "a"]), "amount": np.array([5, 7, 1])})
        {'s': [5, 12, 8]}
        >>> out = e.ingest_many("p", np.array([80_000]), {"card": np.array(["a"]),
        ...                                               "amount": np.array([2])}, arrow=True)
        >>> out["s"].type, out["s"].to_pylist()
        (DataType(int64), [10])
        >>> e.close()
        """
        return self._plan.ingest_many(stream, ts_ms, columns, arrow=arrow)

    def query(self, name: str, key: Any, ts_ms: int) -> Any:
        """The value of metric ``name`` for group ``key`` at ``ts_ms``, without an event.
        Read-only; ``ts_ms`` before the last event is clamped to it."""
        return self._plan.query(name, key, int(ts_ms))

    def durable_positions(self) -> dict[str, int]:
        """Per stream, how many events are safely on disk (re-feed from there after a crash)."""
        return {name: sp.res.durable_pos for name, sp in self._plan.streams.items()}

    def positions(self) -> dict[str, int]:
        """Per stream, how many events were ingested."""
        return {name: sp.res.next_pos for name, sp in self._plan.streams.items()}

    def sync(self) -> None:
        """Wait until every closed chunk is on disk."""
        self._writer.barrier()

    # -- snapshots -----------------------------------------------------------------------
    def capture(self) -> Capture:
        """Take a snapshot's consistent part now, in memory only, and return it; its
        ``write(directory)`` (any thread, later) does the files and encodes the native
        states from their frozen copy (``StreamCore.freeze``). The caller's thread (the
        ingesting one) does no file operation: the segments are hard-linked by the writer
        thread when it reaches this point of its queue (after the chunks closed before,
        before any trim or chunk queued after), so ingest, chunk closes and trims may go on
        meanwhile. What a written capture holds is what ``snapshot`` writes at this point."""
        self._writer.check()
        self._captures += 1
        staging = self.data_dir / CAPTURES_DIR / f"{os.getpid()}-{self._captures}"
        open_chunks, states, durable, dests = {}, {}, {}, []
        for name, sp in self._plan.streams.items():
            res = sp.res
            sdir = _stream_dir(name)
            dests.append((res._writer_id(), staging / "reservoir" / sdir))
            open_chunks[sdir] = _open_json(res.open_chunk_state())
            # A copy of the held keys' states, encoded by ``write`` without the GIL (the
            # dump's cost grows with the keys a node holds; the copy's is a fraction of it).
            states[sdir] = sp.core.freeze() if CAPTURE_FROZEN else sp.core.dump()
            # Once the writer placed every chunk closed so far, durable_pos is the end of the
            # last one retained (a chunk leaves the list only once placed).
            durable[name] = res.chunks[-1].end_pos if res.chunks else res.durable_pos
        meta = self._meta_bytes(clean=True, durable=durable)
        ticket = self._writer.native.link(dests)
        return Capture(staging, ticket, meta, open_chunks, states)

    def snapshot(self, directory: str | Path) -> None:
        """Write the whole engine into ``directory`` (must not exist or be empty)."""
        dest = Path(directory)
        if dest.exists() and any(dest.iterdir()):
            raise ValueError(f"snapshot directory {dest} is not empty")
        capture = self.capture()
        try:
            capture.write(dest)
        finally:
            capture.close()

    def snapshot_blocking(self, directory: str | Path) -> None:
        """``snapshot`` with every step on the caller's thread (the path before ``capture``,
        kept for the benchmarks and the tests that compare the two)."""
        dest = Path(directory)
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise ValueError(f"snapshot directory {dest} is not empty")
        self._writer.barrier(roll=True)
        for name, sp in self._plan.streams.items():
            sp.res.copy_segments(dest / "reservoir" / _stream_dir(name))
        self._write_open_chunks(dest)
        self._write_states(dest)
        self._save_meta(clean=True, dest=dest)

    def restore(self, directory: str | Path) -> None:
        """Replace the whole engine with a snapshot taken by ``snapshot``."""
        src = Path(directory)
        if not (src / "engine.json").exists():
            raise ValueError(f"{src} holds no engine snapshot")
        # Checked before the current data goes: a refused snapshot leaves the engine as it was.
        _check_format(orjson.loads((src / "engine.json").read_bytes()), src / "engine.json")
        if not self._closed:
            self._shutdown()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.copytree(src, self.data_dir)
        self._open()

    def digest(self) -> str:
        """A stable hash of the logical state (definitions, positions, aggregation states)."""
        h = hashlib.blake2b(digest_size=16)
        for m in sorted(self._plan.metrics.values(), key=lambda m: m.d.name):
            h.update(f"M{m.d.text}|{m.window.start_pos}\n".encode())
        for name in sorted(self._plan.streams):
            sp = self._plan.streams[name]
            h.update(f"S{name}|{sp.res.next_pos}|{sp.res.last_ts}\n".encode())
            for spec in sorted(sp.cursors, key=repr):
                h.update(f"C{spec!r}|{sp.cursors[spec].pos}\n".encode())
            h.update(sp.core.dump(digest=True))
        return h.hexdigest()


class Capture:
    """A snapshot taken by ``Engine.capture``: its bytes and its native states' frozen copies
    in memory, its segments linked by the engine's writer thread. ``write`` it once, then
    ``close`` it (a capture never written leaves no file once closed, or once the engine
    closes or reopens)."""

    def __init__(self, staging: Path, ticket: Any, meta: bytes, open_chunks: dict[str, bytes],
                 states: dict[str, Any]):
        self._staging = staging
        self._ticket = ticket
        self._meta = meta
        self._open_chunks = open_chunks
        self._states = states
        self._written = False

    def write(self, directory: str | Path) -> None:
        """Write the snapshot into ``directory`` (must not exist or be empty): the layout of
        ``Engine.snapshot``. Waits for the writer thread to have linked the segments."""
        if self._written:
            raise InvariantViolation("this capture was already written")
        dest = Path(directory)
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise ValueError(f"snapshot directory {dest} is not empty")
        self._ticket.wait()
        self._written = True
        for sdir, data in self._open_chunks.items():
            linked, target = self._staging / "reservoir" / sdir, dest / "reservoir" / sdir
            target.parent.mkdir(exist_ok=True)
            shutil.move(str(linked), str(target))  # a rename on the same file system
            _write_atomic(target / "open.json", data)
        (dest / "state").mkdir()
        for sdir, state in self._states.items():
            data = state if isinstance(state, bytes) else state.dump()
            _write_atomic(dest / "state" / f"{sdir}.bin", data)
        _write_atomic(dest / "engine.json", self._meta)
        self._release()

    def close(self) -> None:
        """Drop the segment links of a capture not written (waits for the writer to have
        made them, so none appears after)."""
        if self._staging is None:
            return
        try:
            self._ticket.wait()
        except (OSError, RuntimeError):
            pass  # the links failed or the writer ended: remove what there is
        self._release()

    def _release(self) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        self._open_chunks, self._states = {}, {}
