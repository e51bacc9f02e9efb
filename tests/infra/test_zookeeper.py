"""ZooKeeper round trips through kazoo: ephemeral sequential znodes, a watch, short sessions."""

import threading
import uuid

import pytest
from kazoo.client import KazooClient

from infra.endpoints import ZOOKEEPER

pytestmark = pytest.mark.cluster
WAIT_S = 10.0


@pytest.fixture
def zk():
    client = KazooClient(hosts=ZOOKEEPER, timeout=2.0)
    client.start(timeout=WAIT_S)
    yield client
    client.stop()
    client.close()


def test_ephemeral_sequential_znodes_order_and_vanish_with_the_session(zk):
    base = f"/railflow-tests/election-{uuid.uuid4().hex}"
    zk.ensure_path(base)
    other = KazooClient(hosts=ZOOKEEPER, timeout=2.0)
    other.start(timeout=WAIT_S)
    try:
        first = zk.create(f"{base}/n-", b"a", ephemeral=True, sequence=True)
        second = other.create(f"{base}/n-", b"b", ephemeral=True, sequence=True)
        children = sorted(zk.get_children(base))
        assert [f"{base}/{c}" for c in children] == [first, second]
        assert int(first.rsplit("-", 1)[1]) < int(second.rsplit("-", 1)[1])
    finally:
        other.stop()
        other.close()
    # the other session ended, so its ephemeral node is gone and ours is now the only one
    assert zk.get_children(base) == [first.rsplit("/", 1)[1]]
    zk.delete(base, recursive=True)


def test_a_data_watch_fires_on_change(zk):
    path = f"/railflow-tests/watch-{uuid.uuid4().hex}"
    zk.create(path, b"v1", makepath=True)
    fired = threading.Event()
    seen: list[bytes] = []

    def on_change(event):
        seen.append(zk.get(path)[0])
        fired.set()

    zk.get(path, watch=on_change)
    zk.set(path, b"v2")
    assert fired.wait(WAIT_S), "watch did not fire"
    assert seen == [b"v2"]
    zk.delete(path)


def test_server_grants_a_two_second_session(zk):
    client = KazooClient(hosts=ZOOKEEPER, timeout=2.0)
    client.start(timeout=WAIT_S)
    try:
        # negotiated timeout (ms); the default server config would raise it to >= 4 s
        assert client._session_timeout == 2000
    finally:
        client.stop()
        client.close()
