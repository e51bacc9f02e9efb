"""The reference state machine: a key-value/counter table in an in-memory DuckDB.

``snapshot`` opens a cursor and a transaction while apply is paused, so DuckDB's MVCC keeps
that view for ``SnapshotWriter.write`` on a background thread while apply goes on. The
snapshot is one Parquet file plus a JSON file holding the applied offset.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import duckdb

from replog.entry import Entry
from replog.testing import ops


class _DuckSnapshot:
    def __init__(self, cursor: duckdb.DuckDBPyConnection, offset: int):
        self._cursor = cursor
        self._offset = offset

    def write(self, dir: pathlib.Path) -> None:
        try:
            target = str(dir / "kv.parquet").replace("'", "''")
            self._cursor.execute(
                f"COPY (SELECT k, v FROM kv ORDER BY k) TO '{target}' (FORMAT parquet)"
            )
            (dir / "meta.json").write_text(json.dumps({"applied_offset": self._offset}))
        finally:
            self._cursor.execute("COMMIT")
            self._cursor.close()


class DuckKV:
    def __init__(self) -> None:
        self.con = duckdb.connect(":memory:")
        self.con.execute("CREATE TABLE kv (k VARCHAR PRIMARY KEY, v BIGINT NOT NULL)")
        self._applied = -1

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, entry: Entry) -> list[Any]:
        self._applied = entry.offset
        if entry.kind != ops.KIND:
            return []
        op = ops.decode(entry.payload)
        key = op["key"]
        if op["op"] == "put":
            self.con.execute(
                "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                [key, op["value"]],
            )
        elif op["op"] == "incr":
            self.con.execute(
                "INSERT INTO kv VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = kv.v + excluded.v",
                [key, op["by"]],
            )
        elif op["op"] == "del":
            self.con.execute("DELETE FROM kv WHERE k = ?", [key])
            return [{"key": key, "value": None}]
        return [{"key": key, "value": self.get(key)}]

    def get(self, key: str) -> int | None:
        row = self.con.execute("SELECT v FROM kv WHERE k = ?", [key]).fetchone()
        return None if row is None else int(row[0])

    def snapshot(self) -> _DuckSnapshot:
        cursor = self.con.cursor()
        cursor.execute("BEGIN TRANSACTION")
        cursor.execute("SELECT count(*) FROM kv").fetchone()  # pins the view now
        return _DuckSnapshot(cursor, self._applied)

    def restore(self, dir: pathlib.Path) -> None:
        meta = json.loads((dir / "meta.json").read_text())
        source = str(dir / "kv.parquet").replace("'", "''")
        self.con.execute("DELETE FROM kv")
        self.con.execute(f"INSERT INTO kv SELECT k, v FROM read_parquet('{source}')")
        self._applied = int(meta["applied_offset"])

    def digest(self) -> str:
        rows = self.con.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
        return ops.digest_of([(k, int(v)) for k, v in rows])
