"""A small DuckDB-backed state machine for tests and benchmarks of checkpoints.

It keeps runs and their steps in an in-memory DuckDB, like the runner's state machine does,
and implements the replog ``StateMachine`` shape (``apply``, ``snapshot``, ``restore``,
``digest``, ``applied_offset``). Its snapshot opens a second DuckDB connection inside a
transaction, so MVCC keeps the captured view while apply goes on; the Parquet files and the
digest are produced from that view on the background thread.

Entries are any object with ``offset, writer_id, ts, kind, payload`` (``replog.Entry`` or
``TestEntry``). Kind ``"event"`` carries JSON ``{"event_id", "amount", "score"}``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from checkpoints.errors import InvariantViolation

SCHEMA = {
    "runs": """
        event_id VARCHAR PRIMARY KEY, run_id BIGINT NOT NULL, workflow VARCHAR NOT NULL,
        version INTEGER NOT NULL, state VARCHAR NOT NULL, decision VARCHAR, score INTEGER,
        amount BIGINT NOT NULL, started_ts BIGINT NOT NULL, updated_ts BIGINT NOT NULL
    """,
    "steps": """
        run_id BIGINT NOT NULL, seq INTEGER NOT NULL, node VARCHAR NOT NULL,
        edge VARCHAR NOT NULL, why VARCHAR NOT NULL, ts BIGINT NOT NULL
    """,
}
TABLE_COLUMNS = {
    "runs": "event_id, run_id, workflow, version, state, decision, score, amount, "
    "started_ts, updated_ts",
    "steps": "run_id, seq, node, edge, why, ts",
}
PARQUET_COMPRESSION = "zstd"
META_FILE = "meta.json"
DUCKDB_THREADS_MAX = 2


@dataclass(frozen=True)
class TestEntry:
    offset: int
    writer_id: int
    ts: int
    kind: str
    payload: bytes


def event_entry(offset: int, event_id: str, amount: int, score: int, ts: int = 0) -> TestEntry:
    payload = json.dumps({"event_id": event_id, "amount": amount, "score": score}).encode()
    return TestEntry(
        offset=offset,
        writer_id=1,
        ts=ts or 1_700_000_000_000 + offset,
        kind="event",
        payload=payload,
    )


def _decide(score: int, amount: int) -> tuple[str, str]:
    if score > 90:
        return "block", "score > 90"
    if score > 60:
        return "review", "score > 60"
    return "approve", "default edge"


class DuckStateMachine:
    def __init__(self) -> None:
        self.con = duckdb.connect(":memory:", config={"threads": DUCKDB_THREADS_MAX})
        self._create()
        self._applied = -1
        self._writer_max = 0

    def _create(self) -> None:
        for table, cols in SCHEMA.items():
            self.con.execute(f"CREATE TABLE {table} ({cols})")

    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, entry: Any) -> list[Any]:
        if entry.offset <= self._applied:
            raise InvariantViolation(f"entry {entry.offset} applied after {self._applied}")
        effects: list[Any] = []
        if entry.kind == "event":
            ev = json.loads(entry.payload)
            decision, why = _decide(int(ev["score"]), int(ev["amount"]))
            # The primary key on event_id deduplicates: a repeated event starts no new run.
            inserted = self.con.execute(
                "INSERT INTO runs VALUES (?, ?, 'checkout', 1, 'done', ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING RETURNING run_id",
                [
                    ev["event_id"],
                    entry.offset,
                    decision,
                    ev["score"],
                    ev["amount"],
                    entry.ts,
                    entry.ts,
                ],
            ).fetchall()
            if inserted:
                self.con.execute(
                    "INSERT INTO steps VALUES (?, 0, 'score', 'scored', 'app answered', ?),"
                    " (?, 1, 'decide', ?, ?, ?)",
                    [entry.offset, entry.ts, entry.offset, decision, why, entry.ts],
                )
                effects.append(("reply", ev["event_id"], decision))
        self._applied = entry.offset
        self._writer_max = max(self._writer_max, entry.writer_id)
        return effects

    def bulk_load(self, runs: int, seed: int = 7) -> None:
        """Fill the state as if ``runs`` event entries had been applied (offsets 0..runs-1);
        for benchmarks, where applying a million entries one by one would dominate."""
        if self._applied != -1:
            raise InvariantViolation("bulk_load needs an empty state")
        self.con.execute(
            f"""
            INSERT INTO runs
            SELECT 'evt-' || i, i, 'checkout', 1, 'done',
                   CASE WHEN s > 90 THEN 'block' WHEN s > 60 THEN 'review' ELSE 'approve' END,
                   s, a, 1700000000000 + i, 1700000000000 + i
            FROM (SELECT range AS i, (hash(range + {seed}) % 100)::INTEGER AS s,
                         (hash(range * 31 + {seed}) % 100000)::BIGINT AS a FROM range({runs}))
            """
        )
        self.con.execute(
            """
            INSERT INTO steps
            SELECT run_id, 0, 'score', 'scored', 'app answered', started_ts FROM runs
            UNION ALL
            SELECT run_id, 1, 'decide', decision,
                   CASE decision WHEN 'block' THEN 'score > 90' WHEN 'review' THEN 'score > 60'
                        ELSE 'default edge' END, started_ts FROM runs
            """
        )
        self._applied = runs - 1
        self._writer_max = 1

    def snapshot(self) -> DuckSnapshot:
        cur = self.con.cursor()
        # DuckDB fixes a transaction's view at its first read, not at BEGIN; one call for both
        # halves the pause.
        cur.execute("BEGIN TRANSACTION; SELECT 1 FROM runs LIMIT 0").fetchall()
        return DuckSnapshot(cur, self._applied, self._writer_max)

    def restore(self, dir: Path) -> None:
        meta = json.loads((dir / META_FILE).read_text())
        for table in SCHEMA:
            if not (dir / f"{table}.parquet").is_file():
                raise FileNotFoundError(f"checkpoint has no {table}.parquet")
        for table, cols in SCHEMA.items():
            self.con.execute(f"DROP TABLE IF EXISTS {table}")
            self.con.execute(f"CREATE TABLE {table} ({cols})")
            self.con.execute(
                f"INSERT INTO {table} SELECT {TABLE_COLUMNS[table]} FROM read_parquet(?)",
                [str(dir / f"{table}.parquet")],
            )
        self._applied = int(meta["applied_offset"])
        self._writer_max = int(meta["writer_id_max"])

    def digest(self) -> str:
        return digest_of(self.con, self._applied)

    def count(self, table: str = "runs") -> int:
        row = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0


class DuckSnapshot:
    """A captured view: ``write`` and ``digest`` read it from a background thread."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, offset: int, writer_max: int) -> None:
        self.cursor = cursor
        self.offset = offset
        self.writer_max = writer_max

    def write(self, dir: Path) -> None:
        for table in SCHEMA:
            self.cursor.execute(
                f"COPY (SELECT {TABLE_COLUMNS[table]} FROM {table}) TO '{dir / table}.parquet'"
                f" (FORMAT parquet, COMPRESSION {PARQUET_COMPRESSION})"
            )
        meta = {"applied_offset": self.offset, "writer_id_max": self.writer_max}
        (dir / META_FILE).write_text(json.dumps(meta))

    def digest(self) -> str:
        return digest_of(self.cursor, self.offset)

    def close(self) -> None:
        self.cursor.execute("ROLLBACK")
        self.cursor.close()


def digest_of(con: duckdb.DuckDBPyConnection, applied_offset: int) -> str:
    """Order-independent hash of every row of every table (count + sum of row hashes)."""
    h = hashlib.sha256(f"applied:{applied_offset}".encode())
    for table in SCHEMA:
        row = con.execute(
            f"SELECT count(*), coalesce(sum(hash({TABLE_COLUMNS[table]})::HUGEINT), 0) FROM {table}"
        ).fetchone()
        h.update(f"{table}:{row}".encode())
    return h.hexdigest()
