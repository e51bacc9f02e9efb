"""The run store contract, for the in-memory, RocksDB and real HBase stores."""

import hashlib
import uuid

import orjson
import pytest

from infra import endpoints
from runner import ids
from runner.runstore import keys
from runner.runstore.base import RunRecord
from runner.runstore.memory import MemoryRunStore
from runner.runstore.rocks import RocksRunStore


def _run(i: int, offset: int = 1, state: str = "running", card: str = "c1") -> RunRecord:
    return RunRecord(
        run_id=f"r{i}", event_id=f"o-{i}", event_type="order", workflow_id="w3",
        workflow_version=1, state=state,
        event={"event_id": f"o-{i}", "data": {"card": card, "customer": f"u{i % 2}"}},
        decision="approve" if state == "decided" else None, offset=offset,
    )


@pytest.fixture(params=["memory", "rocksdb", pytest.param("hbase", marks=pytest.mark.cluster)])
def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryRunStore()
    elif request.param == "rocksdb":
        s = RocksRunStore(tmp_path / "runs")
    else:  # the real HBase of infra/ through its Thrift server; a fresh table per test
        from runner.runstore.hbase import HBaseRunStore

        s = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                          f"runs_test_{uuid.uuid4().hex[:12]}")
    yield s
    s.close()


def test_get_returns_latest_version_and_ignores_older_rewrite(store):
    store.put_many([_run(1, offset=5)])
    store.put_many([_run(1, offset=9, state="decided")])
    store.put_many([_run(1, offset=5)])  # a re-driven older write
    got = store.get("r1")
    assert got is not None and got.state == "decided" and got.decision == "approve"
    assert store.get("missing") is None


def test_a_later_terms_write_is_not_hidden_by_a_deposed_leaders_late_one(store):
    """Written with the writer's term, as the leader's executor does: within a term a later
    call is newer; a deposed leader (smaller writer id) draining its queue afterwards loses."""
    store.put_many([_run(1, offset=5)], writer_id=6)
    store.put_many([_run(1, offset=9, state="decided"), _run(2, offset=9)], writer_id=6)
    store.put_many([_run(1, offset=5), _run(2, offset=4)], writer_id=5)  # the old leader
    assert store.get("r1").state == "decided" and store.get("r2").offset == 9
    store.put_many([_run(1, offset=12, state="decided")], writer_id=8)  # a newer term
    assert store.get("r1").offset == 12


@pytest.mark.cluster
def test_hbase_writes_a_terms_batch_in_one_thrift_call(monkeypatch):
    """With the writer's term every run of a call shares one cell timestamp: one Thrift batch,
    where a timestamp per offset took one call per run."""
    from thriftpy2.thrift import TClient

    from runner.runstore.hbase import HBaseRunStore

    sent = []
    real_req = TClient._req
    monkeypatch.setattr(TClient, "_req", lambda c, api, *a, **k: (
        sent.append(api) if api == "mutateRowsTs" else None, real_req(c, api, *a, **k))[1])
    s = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                      f"runs_test_{uuid.uuid4().hex[:12]}")
    try:
        s.put_many([_run(i, offset=10 + i) for i in range(20)], writer_id=4)
        assert len(sent) == 1
        assert {s.get(f"r{i}").offset for i in range(20)} == set(range(10, 30))
        s.put_many([_run(i, offset=40 + i) for i in range(100, 120)])  # no term
        assert len(sent) == 21
        with pytest.raises(ValueError):
            s.put_many([_run(1)], writer_id=1 << 31)
    finally:
        s.close()


def _big_run(i: int) -> RunRecord:
    """A run about the size of a W3 run on the wire (~2 KB)."""
    return RunRecord(**{**_run(i, offset=50 + i).__dict__, "event": {
        "event_id": f"o-{i}", "data": {"card": "c1", "note": "x" * 1_800}}})


@pytest.mark.cluster
def test_hbase_a_write_leaves_in_one_send(monkeypatch):
    """A call of 60 runs (~120 KB) goes out in one ``send``: a 4 KiB transport buffer sent it
    in ~30 (each after a ``poll``), a third of the writer's CPU."""
    from thriftpy2.transport import TSocket

    from runner.runstore.hbase import HBaseRunStore

    s = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                      f"runs_test_{uuid.uuid4().hex[:12]}")
    try:
        s.put_many([_big_run(0)], writer_id=2)  # the connection opened
        sends = []
        real_write = TSocket.write
        monkeypatch.setattr(TSocket, "write", lambda sock, data: (
            sends.append(len(data)), real_write(sock, data))[1])
        s.put_many([_big_run(i) for i in range(60)], writer_id=2)
        assert len(sends) == 1 and sends[0] > 100_000
        assert s.get("r59") == _big_run(59)
    finally:
        s.close()


@pytest.mark.cluster
def test_hbase_write_reopens_a_broken_connection(monkeypatch):
    """The Thrift server closes idle connections: a write that fails on the socket is sent
    again, whole, on a fresh connection."""
    from thriftpy2.transport import TSocket

    from runner.runstore.hbase import HBaseRunStore

    s = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                      f"runs_test_{uuid.uuid4().hex[:12]}")
    try:
        s.put_many([_run(1, offset=3)], writer_id=2)
        opened, failures = [], [1]
        real_open, real_write = TSocket.open, TSocket.write

        def write(sock, data):
            if failures:
                failures.pop()
                raise BrokenPipeError("closed by the server")
            real_write(sock, data)

        monkeypatch.setattr(TSocket, "open", lambda sock: (opened.append(1), real_open(sock))[1])
        monkeypatch.setattr(TSocket, "write", write)
        s.put_many([_run(1, offset=8, state="decided")], writer_id=2)
        assert len(opened) == 1 and not failures
        assert s.get("r1").offset == 8
    finally:
        s.close()


def _legacy_cells(run: RunRecord) -> dict[bytes, bytes]:
    """A run row as releases before ``path:record`` wrote it: one cell per field."""
    return {
        b"event:id": run.event_id.encode(), b"event:type": run.event_type.encode(),
        b"event:body": orjson.dumps(run.event), b"path:state": run.state.encode(),
        b"path:workflow": run.workflow_id.encode(),
        b"path:version": str(run.workflow_version).encode(),
        b"path:steps": orjson.dumps(run.path), b"path:metrics": orjson.dumps(run.metrics),
        b"path:scores": orjson.dumps(run.scores), b"path:apps": orjson.dumps(run.apps),
        b"path:started_ts": str(run.started_ts).encode(),
        b"path:updated_ts": str(run.updated_ts).encode(),
        b"path:offset": str(run.offset).encode(), b"decision:name": (run.decision or "").encode(),
    }


def _full_run(offset: int, state: str = "decided") -> RunRecord:
    return RunRecord(
        run_id="r7", event_id="o-7", event_type="order", workflow_id="w3", workflow_version=2,
        state=state, event={"event_id": "o-7", "data": {"card": "c7", "amount": 120}},
        path=[{"node_id": "event", "next_node_id": "approve", "seq": 0}],
        decision="approve" if state == "decided" else None, metrics={"card_count_5m": 3},
        scores={"payment_abuse": 12.5}, apps={"kyc": {"ok": True}}, started_ts=1_000,
        updated_ts=2_000, offset=offset)


def test_hbase_rows_read_in_the_one_cell_layout_and_the_older_one():
    """``path:record`` where present; the older one-cell-per-field rows still read; a row an
    older release wrote last (its ``path:offset`` past the record's) reads its old cells."""
    from runner.runstore.hbase import _mutations, _record

    new_run, old_run = _full_run(9), _full_run(12)
    new_row = {m.column: m.value for m in _mutations(new_run)[0].mutations}
    assert set(new_row) == {b"path:record", b"path:state", b"path:offset", b"decision:name"}
    assert _record("r7", new_row) == new_run
    assert _record("r7", _legacy_cells(new_run)) == new_run
    rewritten = {**_legacy_cells(_full_run(5, "waiting")), **new_row}
    assert _record("r7", rewritten) == new_run
    written_back = {**new_row, **_legacy_cells(old_run)}
    assert _record("r7", written_back) == old_run
    index_rows = [m.row for m in _mutations(new_run)[1:]]
    assert index_rows == [keys.index_key("order", "o-7", "r7"), keys.index_key("card", "c7", "r7"),
                          keys.index_key("event", "o-7", "r7")]


def test_hbase_cells_of_a_run():
    """The bytes each cell of a run holds, and every mutation a put written to the WAL."""
    from runner.runstore.hbase import _mutations

    for run, state, decision in ((_full_run(9), b"decided", b"approve"),
                                 (_full_run(12, "waiting"), b"waiting", b"")):
        batches = _mutations(run)
        assert {m.column: m.value for m in batches[0].mutations} == {
            b"path:record": run.to_json(),
            b"path:state": state, b"path:offset": str(run.offset).encode(),
            b"decision:name": decision}
        assert batches[0].row == keys.run_key("r7")
        for b in batches[1:]:
            assert [(m.column, m.value) for m in b.mutations] == [(b"index:run", b"r7")]
        assert all(m.isDelete is False and m.writeToWAL is True
                   for b in batches for m in b.mutations)


def _event_data_cases() -> list[dict | None]:
    too_long = "\U0001f600" * 129  # 516 bytes: refused though 129 characters
    return [
        None, {}, {"card": "c1", "customer": "u1"}, {"order_id": "ord-1", "card": 4242},
        {"card": "", "customer": None, "order_id": ""}, {"card": "a/b", "customer": "u/2"},
        {"card": "x" * 512, "customer": "x" * 513}, {"card": "é" * 256, "customer": "é" * 257},
        {"card": "\U0001f600" * 128, "customer": too_long}, {"order_id": too_long},
    ]


def test_index_values_and_keys():
    """The values indexed (set, no '/', at most 512 bytes of UTF-8) and their keys, the same
    as ``keys.index_key`` makes of each (which checks them again)."""
    for data in _event_data_cases():
        event = {"event_id": "o-1"} if data is None else {"event_id": "o-1", "data": data}
        run = RunRecord(**{**_run(1).__dict__, "event": event})
        expected = [(k, v) for k, v in (("order", run.order_id), ("card", run.card),
                                         ("customer", run.customer), ("event", run.event_id))
                    if v and "/" not in v and len(v.encode()) <= keys.value_bytes_max]
        assert run.index_values() == expected
        assert run.index_keys() == [keys.index_key(k, v, "r1") for k, v in expected]


@pytest.mark.cluster
def test_hbase_reads_rows_an_older_release_wrote():
    """Rows in the older layout, on the real HBase: get and lookup read them, and a newer
    version written over one (the new layout, a later term) replaces it."""
    import happybase

    from runner.runstore.hbase import HBaseRunStore

    table = f"runs_test_{uuid.uuid4().hex[:12]}"
    s = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT, table)
    conn = happybase.Connection(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT)
    try:
        old = _full_run(5, "waiting")
        t = conn.table(table)
        t.put(keys.run_key("r7"), _legacy_cells(old), timestamp=old.offset + 1)
        t.put(keys.index_key("card", "c7", "r7"), {b"index:run": b"r7"}, timestamp=6)
        assert s.get("r7") == old
        assert s.lookup("card", "c7") == [old]
        s.put_many([_full_run(9)], writer_id=3)
        assert s.get("r7") == _full_run(9)
        assert s.lookup("card", "c7") == [_full_run(9)]
    finally:
        conn.close()
        s.close()


def test_lookups_by_order_card_customer(store):
    store.put_many([_run(i, card="c1" if i < 3 else "c2") for i in range(5)])
    assert sorted(r.run_id for r in store.lookup("card", "c1")) == ["r0", "r1", "r2"]
    assert sorted(r.run_id for r in store.lookup("card", "c2")) == ["r3", "r4"]
    assert [r.run_id for r in store.lookup("order", "o-4")] == ["r4"]
    assert sorted(r.run_id for r in store.lookup("customer", "u1")) == ["r1", "r3"]
    assert store.lookup("card", "c") == []  # a prefix of a value is not a match


def test_lookup_by_event_id_finds_every_run_of_the_event(store):
    """The runs of an event the hot state forgot are found by its id: each of its workflows'
    runs, and those of a later sighting of the same id; the order id does not stand in."""
    runs = [_run(1, offset=3), _run(2, offset=4), _run(3, offset=5)]
    runs[1] = RunRecord(**{**runs[1].__dict__, "event_id": "o-1",
                           "event": {"event_id": "o-1", "data": {"order_id": "ord-9"}}})
    runs[2] = RunRecord(**{**runs[2].__dict__, "event_id": "o-10"})
    store.put_many(runs)
    store.put_many([RunRecord(**{**runs[0].__dict__, "state": "decided", "decision": "block",
                                 "offset": 8})])
    found = {r.run_id: r for r in store.lookup("event", "o-1")}
    assert set(found) == {"r1", "r2"} and found["r1"].decision == "block"
    assert [r.run_id for r in store.lookup("event", "o-10")] == ["r3"]
    assert store.lookup("event", "ord-9") == [] and store.lookup("event", "o-") == []


def test_hash_prefix_is_md5s_hex_for_any_key():
    """Row keys are stored: the prefix stays MD5's first hex digits whichever implementation
    computes it (long, empty and non-ASCII keys too)."""
    for key in ("", "r_0123456789abcdef0123", "card-3138", "cust/é✓", "x" * 10_000,
                *(f"o-{i}" for i in range(300))):
        for chars in (4, 8):
            assert ids.hash_prefix(key, chars) == hashlib.md5(key.encode()).hexdigest()[:chars]
    assert keys.run_key("r_1") == f"run/{hashlib.md5(b'r_1').hexdigest()[:4]}/r_1".encode()


def test_row_keys_are_spread_by_hash_prefix():
    prefixes = {keys.run_key(f"r_{i}").split(b"/")[1] for i in range(200)}
    assert len(prefixes) > 100
    with pytest.raises(ValueError):
        keys.index_prefix("card", "a/b")
