"""Snapshots, restore and the digest of the runner state (DuckDB tables + metrics engine).

``capture`` runs while apply is paused: it opens a DuckDB cursor and transaction (MVCC keeps
that view while apply continues) and has the metrics engine write its snapshot into a temporary
directory. On a background thread, ``SnapshotWriter.write(dir)`` dumps each table to Parquet and
moves the engine's files in, ``digest()`` hashes the captured view (so the checkpointer never
hashes the live state on the apply thread), and ``close()`` releases the view.
Parts: ``<table>.parquet``, ``metrics/``, ``state.json``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from runner.errors import InvariantViolation
from runner.state import schema


class SnapshotWriter:
    def __init__(self, cursor: duckdb.DuckDBPyConnection, engine_dir: Path | None,
                 applied_offset: int, engine_digest: str | None = None) -> None:
        self._cursor: duckdb.DuckDBPyConnection | None = cursor
        self._engine_dir = engine_dir
        self._engine_tmp = engine_dir.parent if engine_dir is not None else None
        self._applied = applied_offset
        self._engine_digest = engine_digest

    def write(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        cursor = self._view()
        for name, (_, order) in schema.TABLES.items():
            target = str(directory / f"{name}.parquet").replace("'", "''")
            cursor.execute(
                f"COPY (SELECT * FROM {name} ORDER BY {order}) TO '{target}' (FORMAT parquet)")
        if self._engine_dir is not None:
            moved = directory / "metrics"
            shutil.move(str(self._engine_dir), str(moved))
            self._engine_dir = moved
        (directory / "state.json").write_text(json.dumps({"applied_offset": self._applied}))

    def digest(self) -> str:
        """The digest of the captured view; equals ``digest(con, engine)`` at the capture."""
        engine_digest = self._engine_digest
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
        return _hash_tables(self._view(), engine_digest)

    def close(self) -> None:
        """Release the captured view (and the engine files if ``write`` never moved them)."""
        if self._cursor is not None:
            self._cursor.execute("COMMIT")
            self._cursor.close()
            self._cursor = None
        if self._engine_tmp is not None:
            shutil.rmtree(self._engine_tmp, ignore_errors=True)
            self._engine_tmp = None

    def _view(self) -> duckdb.DuckDBPyConnection:
        if self._cursor is None:
            raise InvariantViolation("snapshot view already released")
        return self._cursor


def capture(con: duckdb.DuckDBPyConnection, engine: Any, applied_offset: int) -> SnapshotWriter:
    cursor = con.cursor()
    cursor.execute("BEGIN TRANSACTION")
    cursor.execute("SELECT count(*) FROM runs").fetchall()  # pin the MVCC view now
    engine_dir, engine_digest = None, None
    if hasattr(engine, "snapshot"):
        engine_dir = Path(tempfile.mkdtemp(prefix="railflow-snap-")) / "metrics"
        engine.snapshot(engine_dir)
    elif hasattr(engine, "digest"):  # nothing to rebuild it from later: hash it now
        engine_digest = engine.digest()
    return SnapshotWriter(cursor, engine_dir, applied_offset, engine_digest)


def restore(con: duckdb.DuckDBPyConnection, engine: Any, directory: Path) -> int:
    meta = json.loads((directory / "state.json").read_text())
    con.execute("BEGIN TRANSACTION")
    for name in schema.TABLES:
        part = directory / f"{name}.parquet"
        if not part.exists():
            con.execute("ROLLBACK")
            raise InvariantViolation(f"snapshot {directory} lacks {part.name}")
        con.execute(f"DELETE FROM {name}")
        path = str(part).replace("'", "''")
        con.execute(f"INSERT INTO {name} SELECT * FROM read_parquet('{path}')")
    con.execute("COMMIT")
    if (directory / "metrics").exists() and hasattr(engine, "restore"):
        engine.restore(directory / "metrics")
    return int(meta["applied_offset"])


def digest(con: duckdb.DuckDBPyConnection, engine: Any) -> str:
    """A stable hash of the logical state: every table in its total order, then the engine."""
    cursor = con.cursor()
    try:
        return _hash_tables(cursor, engine.digest() if hasattr(engine, "digest") else None)
    finally:
        cursor.close()


def _hash_tables(cursor: duckdb.DuckDBPyConnection, engine_digest: str | None) -> str:
    h = hashlib.sha256()
    for name, (_, order) in schema.TABLES.items():
        h.update(name.encode())
        for row in cursor.execute(f"SELECT * FROM {name} ORDER BY {order}").fetchall():
            h.update(repr(row).encode())
    if engine_digest is not None:
        h.update(str(engine_digest).encode())
    return h.hexdigest()
