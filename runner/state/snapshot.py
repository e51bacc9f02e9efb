"""Snapshots, restore and the digest of the runner state (DuckDB tables + metrics engine).

``capture`` runs while apply is paused: it opens a DuckDB cursor and transaction (MVCC keeps
that view while apply continues) and has the metrics engine write its snapshot into a temporary
directory. ``SnapshotWriter.write(dir)`` then dumps each table to Parquet on a background
thread and moves the engine's files in. Parts: ``<table>.parquet``, ``metrics/``, ``state.json``.
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
                 applied_offset: int) -> None:
        self._cursor = cursor
        self._engine_dir = engine_dir
        self._applied = applied_offset

    def write(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            for name, (_, order) in schema.TABLES.items():
                target = str(directory / f"{name}.parquet").replace("'", "''")
                self._cursor.execute(
                    f"COPY (SELECT * FROM {name} ORDER BY {order}) TO '{target}' (FORMAT parquet)")
            self._cursor.execute("COMMIT")
        finally:
            self._cursor.close()
        if self._engine_dir is not None:
            shutil.move(str(self._engine_dir), str(directory / "metrics"))
            shutil.rmtree(self._engine_dir.parent, ignore_errors=True)
        (directory / "state.json").write_text(json.dumps({"applied_offset": self._applied}))


def capture(con: duckdb.DuckDBPyConnection, engine: Any, applied_offset: int) -> SnapshotWriter:
    cursor = con.cursor()
    cursor.execute("BEGIN TRANSACTION")
    cursor.execute("SELECT count(*) FROM runs").fetchall()  # pin the MVCC view now
    engine_dir = None
    if hasattr(engine, "snapshot"):
        engine_dir = Path(tempfile.mkdtemp(prefix="railflow-snap-")) / "metrics"
        engine.snapshot(engine_dir)
    return SnapshotWriter(cursor, engine_dir, applied_offset)


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
    h = hashlib.sha256()
    cursor = con.cursor()
    try:
        for name, (_, order) in schema.TABLES.items():
            h.update(name.encode())
            for row in cursor.execute(f"SELECT * FROM {name} ORDER BY {order}").fetchall():
                h.update(repr(row).encode())
    finally:
        cursor.close()
    if hasattr(engine, "digest"):
        h.update(str(engine.digest()).encode())
    return h.hexdigest()
