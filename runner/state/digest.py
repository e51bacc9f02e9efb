"""The state digest: an order-independent sum of one hash per row, kept by apply as rows change.

Each row of every table hashes to 64 bits (``row_hash``; the JSON documents of runs as apply
stages them, objects, which a scan parses back from DuckDB's text; a step's trace as apply
stages it, the JSON bytes of its object, hashed through an ``orjson.Fragment``, which orjson
writes as it is: the same bytes as the object, so the scan's parsed object hashes alike). The
state's sum is those hashes added modulo 2**64: it depends neither on the order rows were
written in nor on when DuckDB got them, so a replica that flushed after every entry, one that
never did and one restored from a snapshot sum the same rows alike. A run's ``stored_offset`` is
hashed apart from the rest of its row (a confirmation changes it for decided runs, which apply
holds only as retention candidates), and the sum of a run's other rows (the run, its steps,
decision and tasks) is kept per held run, so that its eviction subtracts it without reading
DuckDB. ``value`` combines the sum with the metrics engine's digest.

Apply updates the sum from each entry's stage (``runner.state.machine``); ``scan`` computes
it from the tables (restore, and tests checking apply's sum). The small tables that only
non-hot entries change (workflows, metric definitions) are summed again by ``scan_cold``
after each such entry.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb
import orjson

from runner.state import schema
from runner.state.buffer import RUN_JSON_COLUMNS as RUN_JSON
from runner.state.buffer import STEP_JSON_COLUMNS as STEP_JSON

MASK = (1 << 64) - 1
SCHEME = "rowsum1"
RUN_STORED = 11  # stored_offset's place in a runs row (buffer.RUN_FIELDS)
HOT_TABLES = ("events_seen", "runs", "steps", "app_tasks", "decisions", "outbox")
COLD_TABLES = tuple(t for t in schema.TABLES if t not in HOT_TABLES)
_crc32 = zlib.crc32
_adler32 = zlib.adler32
_dumps = orjson.dumps
_loads = orjson.loads
_Fragment = orjson.Fragment
STEP_TRACE = STEP_JSON[0]  # the trace's place in a steps row


def row_hash(table: str, row: tuple) -> int:
    """64 bits of a row's canonical JSON (its values are str, int, float, bool, None or JSON
    documents): CRC-32 and Adler-32 side by side. Not a cryptographic hash (a replica is not
    an adversary): any change of a row's bytes up to 32 bits long changes the CRC, any other
    gets through both with a chance of about 2**-64; both are C calls with no object to
    build (a third of blake2b's cost, which was 1 us of the apply thread per row)."""
    data = _dumps((table, row))
    return (_crc32(data) << 32) | _adler32(data)


def step_hash(row: tuple) -> int:
    """A steps row as apply stages it, its trace as JSON bytes (``runner.state.steps``):
    hashed as the row holding the object they encode (orjson writes a ``Fragment`` as it is,
    and the bytes are what orjson makes of that object), so a scan's parsed row hashes alike."""
    return row_hash("steps", (*row[:STEP_TRACE], _Fragment(row[STEP_TRACE]),
                              *row[STEP_TRACE + 1:]))


def run_hash(row: tuple) -> int:
    """A runs row but its stored_offset (``stored_hash``)."""
    return row_hash("runs", row[:RUN_STORED] + row[RUN_STORED + 1:])


def parsed(row: tuple, json_columns: tuple[int, ...]) -> tuple:
    """A row read from DuckDB with its JSON documents as apply staged them (objects): hashing
    them needs no second encoding on the apply thread, and orjson gives the same bytes for a
    document parsed back from its text."""
    out = list(row)
    for i in json_columns:
        if out[i].__class__ is str:
            out[i] = _loads(out[i])
    return tuple(out)


def stored_hash(run_id: str, stored_offset: int) -> int:
    """A run's stored_offset; nothing while it was never stored (-1: every new run)."""
    return 0 if stored_offset < 0 else row_hash("runs.stored", (run_id, stored_offset))


@dataclass
class Scan:
    """The sum of every row, and what apply keeps beside it, computed from the tables."""

    total: int = 0
    cold: int = 0
    entities: dict[str, int] = field(default_factory=dict)  # run id -> its rows' sum
    outbox: dict[str, int] = field(default_factory=dict)  # effect id -> its row's hash
    seen: dict[str, int] = field(default_factory=dict)  # event id -> its row's hash


def scan(cur: duckdb.DuckDBPyConnection) -> Scan:
    """Sum every table from DuckDB (a full scan, in batches: restore and tests only; ~5 us
    of CPU per row, parsing runs' and steps' JSON back)."""
    out = Scan()
    entities = out.entities
    total = 0
    for row in _rows(cur, "events_seen"):
        h = out.seen[row[0]] = row_hash("events_seen", row)
        total += h
    for row in _rows(cur, "runs"):
        h = run_hash(parsed(row, RUN_JSON))
        entities[row[0]] = entities.get(row[0], 0) + h
        total += h + stored_hash(row[0], row[RUN_STORED])
    for table, json_columns in (("steps", STEP_JSON), ("app_tasks", ()), ("decisions", ())):
        for row in _rows(cur, table):
            h = row_hash(table, parsed(row, json_columns))
            entities[row[0]] = entities.get(row[0], 0) + h
            total += h
    for row in _rows(cur, "outbox"):
        h = out.outbox[row[0]] = row_hash("outbox", row)
        total += h
    out.cold = scan_cold(cur)
    out.total = (total + out.cold) & MASK
    out.entities = {run_id: h & MASK for run_id, h in entities.items()}
    return out


def _rows(cur: duckdb.DuckDBPyConnection, table: str, batch: int = 8_192) -> Iterator[tuple]:
    """Every row of ``table``, a batch at a time (an hour of runs held is millions of rows)."""
    cur.execute(f"SELECT * FROM {table}")
    while rows := cur.fetchmany(batch):
        yield from rows


def scan_cold(cur: duckdb.DuckDBPyConnection) -> int:
    """The sum of the small tables only non-hot entries write (a few rows each)."""
    total = 0
    for table in COLD_TABLES:
        for row in cur.execute(f"SELECT * FROM {table}").fetchall():
            total += row_hash(table, row)
    return total & MASK


def value(total: int, engine_digest: str | None) -> str:
    """The digest of a state: its rows' sum and the metrics engine's digest, named by this
    definition (``checkpoints.checkpointer.scheme``: the former one hashed every row in
    order and had no name)."""
    h = hashlib.sha256(f"rows {total & MASK:016x}".encode())
    if engine_digest is not None:
        h.update(f" engine {engine_digest}".encode())
    return f"{SCHEME}:{h.hexdigest()}"

