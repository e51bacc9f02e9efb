"""The run store contract, for the in-memory, RocksDB and real HBase stores."""

import uuid

import pytest

from infra import endpoints
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


def test_lookups_by_order_card_customer(store):
    store.put_many([_run(i, card="c1" if i < 3 else "c2") for i in range(5)])
    assert sorted(r.run_id for r in store.lookup("card", "c1")) == ["r0", "r1", "r2"]
    assert sorted(r.run_id for r in store.lookup("card", "c2")) == ["r3", "r4"]
    assert [r.run_id for r in store.lookup("order", "o-4")] == ["r4"]
    assert sorted(r.run_id for r in store.lookup("customer", "u1")) == ["r1", "r3"]
    assert store.lookup("card", "c") == []  # a prefix of a value is not a match


def test_row_keys_are_spread_by_hash_prefix():
    prefixes = {keys.run_key(f"r_{i}").split(b"/")[1] for i in range(200)}
    assert len(prefixes) > 100
    with pytest.raises(ValueError):
        keys.index_prefix("card", "a/b")
