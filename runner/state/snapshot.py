"""Snapshots, restore and the digest of the runner state (DuckDB tables + metrics engine).

``capture`` runs while apply is paused: it takes the metrics engine's capture (its state in
memory; the engine's writer thread links its segments, ``Engine.capture``: no file operation on
the apply thread) and the DuckDB view (a cursor in a transaction: MVCC keeps it while apply
continues), or a future of it that the row buffer's flusher opens once the rows applied before
the capture landed (``RowBuffer.when_landed``), and the keys of the hot tables changed since
the previous capture (``runner.state.changes``: the flusher adds the keys of each generation
it writes and cuts the set right after it opened the view, so they are exactly those of the
entries the view holds since that capture). On a background thread,
``SnapshotWriter.write(dir)`` dumps each table to Parquet and writes the engine's files in (a
full snapshot); ``write_delta(dir)`` dumps, per hot table, only the view's rows of the changed
keys and those keys, the small tables whole and the engine's files (a delta on the capture at
``delta_base``; ``immutable(dir)`` names the engine's rolled segments, which a delta checkpoint
may take from its base instead of uploading them). ``digest()`` combines the sum of row hashes
apply kept at the capture (``runner.state.digest``: no table is read) with the engine's
digest, and ``close()`` releases the view. ``restore_chain`` restores a full snapshot and the
deltas after it in one transaction (a delta: delete every row of its keys, insert its rows).
``digest(con, engine)`` computes the same digest from the tables (a full scan: tests and tools).
Parts: ``<table>.parquet``, ``metrics/``, ``state.json`` (a delta's also names its ``base`` and,
per hot table, its key column and ``keys-<column>.parquet``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from runner.errors import InvariantViolation
from runner.state import digest as state_digest
from runner.state import schema
from runner.state.changes import TABLE_KEYS, Changes

# False: the engine's whole snapshot on the apply thread, as before ``Engine.capture`` (the
# benchmarks' A/B switch, bench/checkpoint_pause.py).
ENGINE_CAPTURE = True
# Each table is dumped in scan order: restore and every reader sort by key and the digest is a
# sum of row hashes, so sorting bought nothing but the sort, which was half to two thirds of
# the dump's CPU; zstd at level 1 costs about what snappy did and writes ~40 % of the bytes
# (bench/checkpoint_write.py). True / snappy: the earlier dump (the benchmark's A/B switch).
DUMP_SORTED = False
DUMP_COMPRESSION = "COMPRESSION zstd, COMPRESSION_LEVEL 1"
_KEYS_VIEW = "_checkpoint_keys"


class SnapshotWriter:
    def __init__(self, cursor: duckdb.DuckDBPyConnection | Future[duckdb.DuckDBPyConnection],
                 engine_dir: Path | None,
                 applied_offset: int, engine_digest: str | None = None,
                 rows_total: int | None = None, engine_capture: Any = None,
                 changes: Changes | Future[Changes | None] | None = None) -> None:
        self._cursor: duckdb.DuckDBPyConnection | Future[duckdb.DuckDBPyConnection] | None = \
            cursor
        self._engine_dir = engine_dir
        self._engine_tmp = engine_dir.parent if engine_dir is not None else None
        self._engine_capture = engine_capture  # written into ``metrics/`` by ``write``
        self._applied = applied_offset
        self._engine_digest = engine_digest
        self._rows_total = rows_total
        self._changes = changes

    @property
    def delta_base(self) -> int | None:
        """The offset a delta of this capture is relative to (None: only a full one); waits
        for the flusher to have cut the changed keys."""
        changed = self._changed()
        return None if changed is None else changed.since

    def _changed(self) -> Changes | None:
        if isinstance(self._changes, Future):
            self._changes = self._changes.result()
        return self._changes

    def write(self, directory: Path) -> None:
        """Dump every table whole (a full checkpoint)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        cursor = self._view()
        for name, (_, key) in schema.TABLES.items():
            rows = f"SELECT * FROM {name}" + (f" ORDER BY {key}" if DUMP_SORTED else "")
            _copy(cursor, rows, directory / f"{name}.parquet")
        self._write_engine(directory / "metrics")
        (directory / "state.json").write_text(json.dumps({"applied_offset": self._applied}))

    def write_delta(self, directory: Path) -> None:
        """Dump what changed since ``delta_base``: per hot table, the current rows of the keys
        changed (from the captured view) and those keys (``keys-<column>.parquet``: restore
        deletes every row of them, then inserts the rows); the small tables whole; the
        engine's files whole (``immutable`` names those an earlier checkpoint may hold)."""
        changed = self._changed()
        if changed is None:
            raise InvariantViolation("no changed keys kept: only a full checkpoint")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        cursor = self._view()
        tables: dict[str, dict[str, str]] = {}
        for column, keys in changed.keys.items():
            keys_file = f"keys-{column}.parquet"
            keys_table = pa.table({"k": pa.array(sorted(keys), type=pa.string())})
            pq.write_table(keys_table, directory / keys_file, compression="zstd")
            cursor.register(_KEYS_VIEW, keys_table)  # the same keys select the rows
            try:
                for name, key in TABLE_KEYS.items():
                    if key != column:
                        continue
                    _copy(cursor, f"SELECT * FROM {name} WHERE {key} IN "
                                  f"(SELECT k FROM {_KEYS_VIEW})", directory / f"{name}.parquet")
                    tables[name] = {"key": key, "keys": keys_file}
            finally:
                cursor.unregister(_KEYS_VIEW)
        for name in schema.TABLES:
            if name not in TABLE_KEYS:
                _copy(cursor, f"SELECT * FROM {name}", directory / f"{name}.parquet")
        self._write_engine(directory / "metrics")
        (directory / "state.json").write_text(json.dumps(
            {"applied_offset": self._applied, "base": changed.since, "tables": tables}))

    @staticmethod
    def immutable(directory: Path) -> list[str]:
        """The files of a written snapshot that never change once made (paths relative to
        ``directory``): every reservoir segment of a stream but its newest, which the engine
        still appends to (a segment rolls at ``SEGMENT_BYTES_MAX``; trims delete whole
        files). A checkpoint may name such a file from an earlier one of its chain."""
        found = []
        for stream in sorted((Path(directory) / "metrics" / "reservoir").glob("*")):
            segments = sorted(stream.glob("seg-*.rfs"))
            found += [p.relative_to(directory).as_posix() for p in segments[:-1]]
        return found

    def _write_engine(self, moved: Path) -> None:
        if self._engine_capture is not None:
            self._engine_capture.write(moved)
            self._engine_capture.close()
            self._engine_capture = None
            self._engine_dir = moved
        elif self._engine_dir is not None:
            shutil.move(str(self._engine_dir), str(moved))
            self._engine_dir = moved

    def digest(self) -> str:
        """The digest of the captured state; equals ``digest(con, engine)`` at the capture."""
        engine_digest = self._engine_digest
        if self._engine_capture is not None:  # not written yet: write it aside to read it
            self._engine_tmp = Path(tempfile.mkdtemp(prefix="railflow-snap-"))
            self._write_engine(self._engine_tmp / "metrics")
        if self._engine_dir is not None:
            from metrics_engine import Engine  # a throwaway copy: the snapshot stays untouched

            scratch = Path(tempfile.mkdtemp(prefix="railflow-digest-"))
            engine = Engine(scratch / "engine", fsync=False)
            try:
                engine.restore(self._engine_dir)
                engine_digest = engine.digest()
            finally:
                engine.close()
                shutil.rmtree(scratch, ignore_errors=True)
        total = self._rows_total
        if total is None:  # no sum kept by apply: scan the captured view
            total = state_digest.scan(self._view()).total
        return state_digest.value(total, engine_digest)

    def close(self) -> None:
        """Release the captured view (and the engine files if ``write`` never moved them)."""
        if self._cursor is not None:
            try:
                cursor = self._resolved()
            except Exception:  # noqa: BLE001 - the view never opened: nothing to release
                cursor = None
            self._cursor = None
            if cursor is not None:
                cursor.execute("COMMIT")
                cursor.close()
        if self._engine_capture is not None:
            self._engine_capture.close()
            self._engine_capture = None
        if self._engine_tmp is not None:
            shutil.rmtree(self._engine_tmp, ignore_errors=True)
            self._engine_tmp = None

    def _view(self) -> duckdb.DuckDBPyConnection:
        if self._cursor is None:
            raise InvariantViolation("snapshot view already released")
        return self._resolved()

    def _resolved(self) -> duckdb.DuckDBPyConnection:
        """The view, once the flusher opened it (it raises if the flush failed)."""
        if isinstance(self._cursor, Future):
            self._cursor = self._cursor.result()
        assert self._cursor is not None
        return self._cursor


def _copy(cursor: duckdb.DuckDBPyConnection, rows: str, target: Path) -> None:
    path = str(target).replace("'", "''")
    cursor.execute(f"COPY ({rows}) TO '{path}' (FORMAT parquet, {DUMP_COMPRESSION})")


def open_view(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor in a transaction whose MVCC view is pinned at the tables as they are now."""
    cursor = con.cursor()
    cursor.execute("BEGIN TRANSACTION")
    cursor.execute("SELECT count(*) FROM runs").fetchall()  # pin the MVCC view now
    return cursor


def capture(view: duckdb.DuckDBPyConnection | Future[duckdb.DuckDBPyConnection], engine: Any,
            applied_offset: int, rows_total: int | None = None,
            changes: Changes | Future[Changes | None] | None = None) -> SnapshotWriter:
    """``view``: a connection (its view is opened now) or the future of a view opened by
    ``open_view``; ``rows_total``: the digest's sum of row hashes at ``applied_offset``, as
    apply kept it (None: the writer's ``digest`` scans the view); ``changes``: the keys
    changed since an earlier capture (or its future), cut where ``view`` was opened (None:
    full only)."""
    cursor = view if isinstance(view, Future) else open_view(view)
    engine_dir, engine_digest, engine_capture = None, None, None
    if hasattr(engine, "capture") and ENGINE_CAPTURE:
        engine_capture = engine.capture()
    elif hasattr(engine, "snapshot"):
        engine_dir = Path(tempfile.mkdtemp(prefix="railflow-snap-")) / "metrics"
        getattr(engine, "snapshot_blocking", engine.snapshot)(engine_dir)
    elif hasattr(engine, "digest"):  # nothing to rebuild it from later: hash it now
        engine_digest = engine.digest()
    return SnapshotWriter(cursor, engine_dir, applied_offset, engine_digest, rows_total,
                          engine_capture, changes)


def restore(con: duckdb.DuckDBPyConnection, engine: Any, directory: Path) -> int:
    """Restore one full snapshot; the offset it was taken at."""
    return restore_chain(con, engine, [Path(directory)])


def restore_chain(con: duckdb.DuckDBPyConnection, engine: Any, directories: list[Path]) -> int:
    """Restore a full snapshot and the deltas after it, oldest first (each one's ``base`` the
    offset of the one before), in one transaction; the engine from the last (every snapshot
    holds the engine whole). Returns the last one's offset."""
    metas = [json.loads((Path(d) / "state.json").read_text()) for d in directories]
    if not metas or "base" in metas[0]:
        raise InvariantViolation(f"a chain starts with a full snapshot: {directories[:1]}")
    for before, meta, d in zip(metas, metas[1:], directories[1:], strict=False):
        if meta.get("base") != before["applied_offset"]:
            raise InvariantViolation(
                f"delta {d} is based on {meta.get('base')}, not {before['applied_offset']}")
    con.execute("BEGIN TRANSACTION")
    try:
        for directory, meta in zip(directories, metas, strict=True):
            _restore_one(con, Path(directory), meta.get("tables", {}))
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    last = Path(directories[-1])
    if (last / "metrics").exists() and hasattr(engine, "restore"):
        engine.restore(last / "metrics")
    return int(metas[-1]["applied_offset"])


def _restore_one(con: duckdb.DuckDBPyConnection, directory: Path,
                 delta: dict[str, dict[str, str]]) -> None:
    """Tables named in ``delta``: delete the rows of its keys, insert its rows; the others:
    replace every row."""
    for name in schema.TABLES:
        part = directory / f"{name}.parquet"
        if not part.exists():
            raise InvariantViolation(f"snapshot {directory} lacks {part.name}")
        of = delta.get(name)
        if of is None:
            con.execute(f"DELETE FROM {name}")
        else:
            keys = _quoted(directory / of["keys"])
            con.execute(f"DELETE FROM {name} WHERE {of['key']} IN "
                        f"(SELECT k FROM read_parquet('{keys}'))")
        con.execute(f"INSERT INTO {name} SELECT * FROM read_parquet('{_quoted(part)}')")


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def digest(con: duckdb.DuckDBPyConnection, engine: Any) -> str:
    """The digest of the state in DuckDB, from every row (``runner.state.digest``)."""
    cursor = con.cursor()
    try:
        return state_digest.value(state_digest.scan(cursor).total,
                                  engine.digest() if engine is not None
                                  and hasattr(engine, "digest") else None)
    finally:
        cursor.close()

