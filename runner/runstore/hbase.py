"""The cluster run store: HBase through happybase (Thrift).

One table, four column families: ``event``, ``path``, ``decision`` and ``index`` (rows that
point from an order id, card or customer to a run). A run row holds the whole ``RunRecord`` in
one cell, ``path:record`` (its JSON), beside the few columns a scan filters on: ``path:state``,
``path:offset`` and ``decision:name``. Building and sending fourteen cells per run was most of
the leader's run-store writer; four cost a third of it.

Rows written before (``event:id``, ``event:body``, ``path:steps``, ... one cell per field, no
``path:record``) still read: ``_record`` decodes either layout. A row rewritten in the new
layout keeps its old cells, which ``path:record`` supersedes; if an older release wrote the
row last (its ``path:offset`` is past the record's), the old cells are the newer version.

Cell timestamps order the versions, so a re-driven older write never hides a newer one and
writing the same version twice is harmless:

- with the writer's term (``put_many(runs, writer_id)``, what the leader's executor passes), every
  cell of one call gets ``writer_id << 32 | n``, ``n`` counting this store's calls: one Thrift
  batch per call (Thrift1 takes one timestamp per batch). A leader produces versions in log
  order and writes them in that order, and a later term has a larger writer id, so the newest
  version carries the largest timestamp; a deposed leader's late writes lose to its successor's.
- without it, each run's cells get ``offset + 1`` of the entry that produced the version: one
  batch per distinct offset (a Thrift call per run, in practice).

Writes go through the store's own Thrift connection (``_WriteConnection``), whose write buffer
holds a whole call: happybase's connections buffer 4 KiB, so a call of 50 runs (~120 KB) left
in ~30 ``send`` syscalls, each after a ``poll`` (the socket has a timeout), about a third of
the writer thread's CPU. Reads use happybase's pool.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict

import happybase
import orjson
from Hbase_thrift import BatchMutation, Hbase, Mutation
from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TException
from thriftpy2.transport import TCyBufferedTransport

from runner.runstore import keys
from runner.runstore.base import RunRecord, lookup_runs_max

FAMILIES = ("event", "path", "decision", "index")
pool_connections_max = 4
thrift_timeout_ms = 5_000
thrift_attempts_max = 3  # the Thrift server closes idle connections; the pool reopens them
# The write connection's buffer (each way): a call of up to ~100 runs leaves in one ``send``,
# a larger one in a few (a run is ~2.4 KB on the wire).
write_buffer_bytes = 256 * 1024


RECORD = b"path:record"


def _mutations(run: RunRecord) -> list[BatchMutation]:
    """The run row and its index rows, as Thrift mutations (built directly: happybase's
    ``Batch.put`` costs as much again per cell). Mutations are only read when sent, so one
    object serves every row that holds the same cell."""
    run_id = run.run_id.encode()
    out = [BatchMutation(keys.run_key(run.run_id), [
        Mutation(False, RECORD, run.to_json(), True), _cell(b"path:state", run.state),
        Mutation(False, b"path:offset", b"%d" % run.offset, True),
        _cell(b"decision:name", run.decision or "")])]
    cell = [Mutation(False, b"index:run", run_id, True)]  # the same in each index row
    for key in run.index_keys():
        out.append(BatchMutation(key, cell))
    return out


@functools.lru_cache(maxsize=256)
def _cell(column: bytes, value: str) -> Mutation:
    """A put of a value many runs share (a state, a decision's name), made once."""
    return Mutation(False, column, value.encode(), True)


def _record(run_id: str, row: dict[bytes, bytes]) -> RunRecord:
    """A run from its row, in either layout (see the module's docstring)."""
    raw = row.get(RECORD)
    if raw is not None:
        record = RunRecord.from_json(raw)
        written_last = row.get(b"path:offset")
        if written_last is None or int(written_last) <= record.offset:
            return record
    return _record_of_cells(run_id, row)


def _record_of_cells(run_id: str, row: dict[bytes, bytes]) -> RunRecord:
    """A row of one cell per field, as written before ``path:record``."""
    decision = row.get(b"decision:name", b"").decode()
    return RunRecord(
        run_id=run_id,
        event_id=row[b"event:id"].decode(),
        event_type=row[b"event:type"].decode(),
        workflow_id=row[b"path:workflow"].decode(),
        workflow_version=int(row[b"path:version"]),
        state=row[b"path:state"].decode(),
        event=orjson.loads(row[b"event:body"]),
        path=orjson.loads(row[b"path:steps"]),
        decision=decision or None,
        metrics=orjson.loads(row[b"path:metrics"]),
        scores=orjson.loads(row.get(b"path:scores", b"{}")),  # rows written before they were kept
        apps=orjson.loads(row.get(b"path:apps", b"{}")),
        started_ts=int(row[b"path:started_ts"]),
        updated_ts=int(row[b"path:updated_ts"]),
        offset=int(row[b"path:offset"]),
    )


class _WideBufferedTransports:
    """A thriftpy2 transport factory: buffered, ``write_buffer_bytes`` each way."""

    @staticmethod
    def get_transport(trans) -> TCyBufferedTransport:
        return TCyBufferedTransport(trans, buf_size=write_buffer_bytes)


class _WriteConnection:
    """One Thrift client for the store's writes, opened when first needed and again after a
    failure (the Thrift server closes idle connections). A write is retried whole: the same
    cells at the same timestamp, so a batch applied twice stores the same."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._client = None
        self._lock = threading.Lock()  # one call at a time on the connection

    def mutate_rows_ts(self, table: bytes, mutations: list[BatchMutation], ts: int) -> None:
        with self._lock:
            for attempt in range(1, thrift_attempts_max + 1):
                try:
                    if self._client is None:
                        self._client = make_client(
                            Hbase, self._host, self._port, timeout=thrift_timeout_ms,
                            proto_factory=TCyBinaryProtocolFactory(decode_response=False),
                            trans_factory=_WideBufferedTransports())
                    self._client.mutateRowsTs(table, mutations, ts, {})
                    return
                except (TException, OSError):
                    self._close()
                    if attempt == thrift_attempts_max:
                        raise

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except (TException, OSError):
                pass  # already broken: dropped either way

    def close(self) -> None:
        with self._lock:
            self._close()


class HBaseRunStore:
    def __init__(self, host: str, port: int, table: str) -> None:
        self._table_name = table
        self._writer = _WriteConnection(host, port)
        self._calls = 0  # orders the writes of one term (see the module's docstring)
        self._pool = happybase.ConnectionPool(
            size=pool_connections_max, host=host, port=port, timeout=thrift_timeout_ms
        )
        with self._pool.connection() as conn:
            existing = {t.decode() for t in conn.tables()}
            if table not in existing:
                try:
                    conn.create_table(table, {f: {"max_versions": 1} for f in FAMILIES})
                except Exception:  # noqa: BLE001 - another node created it first
                    if table.encode() not in conn.tables():
                        raise

    def _call(self, fn):
        """Run ``fn(table)``, again on a fresh connection when the pooled one went stale."""
        for attempt in range(1, thrift_attempts_max + 1):
            try:
                with self._pool.connection() as conn:  # a failing connection is replaced
                    return fn(conn.table(self._table_name))
            except (TException, OSError):
                if attempt == thrift_attempts_max:
                    raise
        return None

    def put_many(self, runs: list[RunRecord], writer_id: int | None = None) -> None:
        if not runs:
            return
        by_ts: dict[int, list[RunRecord]] = defaultdict(list)
        if writer_id is not None:
            if not 0 <= writer_id < 1 << 31:
                raise ValueError(f"writer id {writer_id} does not fit a cell timestamp")
            self._calls += 1
            by_ts[writer_id << 32 | self._calls] = runs
        else:
            for run in runs:
                by_ts[run.offset + 1].append(run)
        table = self._table_name.encode()
        for ts, group in by_ts.items():
            self._writer.mutate_rows_ts(table, [m for run in group for m in _mutations(run)], ts)

    def get(self, run_id: str) -> RunRecord | None:
        row = self._call(lambda table: table.row(keys.run_key(run_id)))
        return _record(run_id, row) if row else None

    def lookup(self, kind: str, value: str, limit: int = lookup_runs_max) -> list[RunRecord]:
        prefix = keys.index_prefix(kind, value)
        limit = min(limit, lookup_runs_max)

        def scan(table):
            run_ids = [keys.run_id_of_index_key(k) for k, _ in
                       table.scan(row_prefix=prefix, limit=limit, columns=[b"index:run"])]
            return run_ids, table.rows([keys.run_key(r) for r in run_ids])

        run_ids, rows = self._call(scan)
        by_key = dict(rows)
        return [_record(r, by_key[keys.run_key(r)]) for r in run_ids if keys.run_key(r) in by_key]

    def close(self) -> None:
        self._writer.close()
