"""ZooKeeper election on the real server: the smallest znode leads, the next one takes over."""

import queue
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from infra import endpoints
from replog.protocols import Deposed, Elected
from replog.testing.zkfaults import expire_session
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


def _next(events: queue.Queue, kind: type, timeout_s: float = WAIT_S):
    """The next event of ``kind``, skipping others (a flap may depose and elect in between)."""
    while True:
        event = events.get(timeout=timeout_s)
        if isinstance(event, kind):
            return event


def _elected_above(events: queue.Queue, writer_id: int, timeout_s: float = WAIT_S) -> Elected:
    """The first election with a writer id above ``writer_id``. An election with the old id may
    come first: when a second client takes the session to end it, the server drops the first
    one's connection, and that client can reconnect to its still-live session (the same znode,
    rightly leading again) before the session is closed."""
    while True:
        event = _next(events, Elected, timeout_s)
        if event.writer_id > writer_id:
            return event
        assert event.writer_id == writer_id, "elected below its first writer id"


def test_an_expired_session_rejoins_and_leads_with_a_new_znode():
    """The leader's session is ended from outside (as when ZooKeeper outlives it): it is
    deposed, rejoins with a new znode and leads again with that znode's larger sequence."""
    path = f"/replog-test/election-{uuid.uuid4().hex[:8]}"
    events: queue.Queue = queue.Queue()
    a = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    a.start("a", "http://a", events.put)
    try:
        first = _next(events, Elected)
        expire_session(a._zk, endpoints.ZOOKEEPER)
        _next(events, Deposed)
        again = _elected_above(events, first.writer_id)
        assert a.writer_id == again.writer_id
        assert a.leader_url() == "http://a"
    finally:
        a.stop()


def test_joins_failing_after_a_lost_session_are_retried_until_one_works(monkeypatch):
    """The soak's failure: after ZooKeeper came back, the first joins of a node whose session
    was lost failed (ConnectionLoss, SessionExpired while the server settles) and the node
    never joined again. Here the session is ended from outside and the next creates fail the
    same way; resigns meanwhile must not raise, and the node must lead again, with the new
    znode's larger sequence as its writer id."""
    path = f"/replog-test/election-{uuid.uuid4().hex[:8]}"
    events: queue.Queue = queue.Queue()
    a = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    a.start("a", "http://a", events.put)
    try:
        first = _next(events, Elected)
        real_create = KazooClient.create
        failures = [ConnectionLoss(), SessionExpiredError(), ConnectionLoss()]

        def flaky_create(client, node_path, *args, **kwargs):
            # on the class: a client the keeper makes in place of a stuck one fails alike
            if failures and node_path.startswith(path):
                raise failures.pop(0)
            return real_create(client, node_path, *args, **kwargs)

        monkeypatch.setattr(KazooClient, "create", flaky_create)
        expire_session(a._zk, endpoints.ZOOKEEPER)
        for _ in range(3):
            a.resign()  # must not raise, whatever state the session is in
        again = _elected_above(events, first.writer_id)
        assert not failures, "the injected join failures were not all hit"
        assert a.writer_id == again.writer_id
        children = a._zk.get_children(path)
        assert children == [f"n_{again.writer_id:010d}"]  # no stale znode of mine left
    finally:
        a.stop()


def test_a_replaced_client_still_leads_after_kazoo_gives_up(monkeypatch):
    """If the kazoo client stays disconnected (it stopped reconnecting), the keeper makes a new
    client and joins with it."""
    import replog.zk as zk_mod

    path = f"/replog-test/election-{uuid.uuid4().hex[:8]}"
    events: queue.Queue = queue.Queue()
    a = ZkElection(endpoints.ZOOKEEPER, path, session_timeout_s=2.0)
    a.start("a", "http://a", events.put)
    try:
        first = _next(events, Elected)
        monkeypatch.setattr(zk_mod, "keeper_check_every_s", 0.2)
        old = a._zk
        old.remove_listener(a._on_state)
        old.stop()  # a client that will never reconnect
        a._on_state("LOST")
        _elected_above(events, first.writer_id, timeout_s=60.0)
        assert a._zk is not old
    finally:
        a.stop()
