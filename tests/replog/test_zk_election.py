"""ZooKeeper election on the real server: the smallest znode leads, the next one takes over."""

import queue
import uuid

import pytest

from infra import endpoints
from replog.protocols import Deposed, Elected
from replog.zk import ZkElection

pytestmark = pytest.mark.cluster
WAIT_S = 20.0


def test_smallest_znode_leads_and_the_successor_takes_over():
    path = f"/replog-test/election-{uuid.uuid4().hex[:8]}"
    events = {"a": queue.Queue(), "b": queue.Queue()}
    a = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    b = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    a.start("a", "http://a", events["a"].put)
    b.start("b", "http://b", events["b"].put)
    try:
        first = events["a"].get(timeout=WAIT_S)
        assert isinstance(first, Elected)
        assert events["b"].empty()
        assert b.leader_url() == "http://a" and a.leader_url() == "http://a"
        a.stop()
        assert isinstance(events["a"].get(timeout=WAIT_S), Deposed)
        second = events["b"].get(timeout=WAIT_S)
        assert isinstance(second, Elected) and second.writer_id > first.writer_id
        assert b.leader_url() == "http://b"
    finally:
        a.stop()
        b.stop()


def test_resign_rejoins_with_a_larger_writer_id():
    path = f"/replog-test/election-{uuid.uuid4().hex[:8]}"
    events: queue.Queue = queue.Queue()
    a = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    a.start("a", "http://a", events.put)
    try:
        first = events.get(timeout=WAIT_S)
        a.resign()
        assert isinstance(events.get(timeout=WAIT_S), Deposed)
        again = events.get(timeout=WAIT_S)
        assert isinstance(again, Elected) and again.writer_id > first.writer_id
    finally:
        a.stop()
