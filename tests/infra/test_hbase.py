"""HBase round trips through happybase (Thrift 1): create table, put, get, scan by row prefix."""

import uuid

import happybase
import pytest

from infra.endpoints import HBASE_THRIFT_HOST, HBASE_THRIFT_PORT

pytestmark = pytest.mark.cluster


@pytest.fixture
def table():
    conn = happybase.Connection(HBASE_THRIFT_HOST, HBASE_THRIFT_PORT, timeout=20000)
    name = f"railflow_test_{uuid.uuid4().hex[:10]}".encode()
    conn.create_table(name, {"r": {"max_versions": 1}})
    yield conn.table(name)
    conn.delete_table(name, disable=True)
    conn.close()


def test_put_get_and_prefix_scan(table):
    rows = {f"run#{k}#{i:03d}".encode(): f"step-{k}-{i}".encode()
            for k in ("a", "b") for i in range(5)}
    with table.batch() as batch:
        for row, value in rows.items():
            batch.put(row, {b"r:state": value})
    assert table.row(b"run#a#003") == {b"r:state": b"step-a-3"}
    assert table.row(b"run#zzz") == {}
    scanned = list(table.scan(row_prefix=b"run#b#"))
    assert [k for k, _ in scanned] == sorted(k for k in rows if k.startswith(b"run#b#"))
    assert all(data[b"r:state"] == rows[k] for k, data in scanned)
