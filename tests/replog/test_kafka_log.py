"""On the real Kafka: an append (or a send's delivery report) says where each record landed, a
reader pauses and seeks, and a leader applies its own records without reading them back,
reading only the gaps a stale writer left between them, as its followers apply everything
they read. A leader produces on the submitting thread: a record the client or the broker
refuses fails its request, and a deposed leader's late record is fenced."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from infra import endpoints
from replog import AppendFailed, Fenced, Node, Role
from replog.entry import Entry
from replog.kafka import KafkaLog
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV
from replog.testing.memlog import ManualElection

from .test_node import wait_for

pytestmark = pytest.mark.cluster
WAIT_S = 30.0  # only reached when something is broken


def _topic() -> str:
    return f"replog-own-{uuid.uuid4().hex[:10]}"


def _read(reader, until_offset: int, timeout_s: float = WAIT_S) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while (not out or out[-1][0] < until_offset) and time.monotonic() < deadline:
        out += reader.poll(0.2, 1000)
    return out


def test_an_append_returns_each_records_offset_even_with_another_writer_between():
    topic = _topic()
    ours, theirs = KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic), KafkaLog(
        endpoints.KAFKA_BOOTSTRAP, topic, create=False)
    try:
        first = ours.append([b"a0", b"a1", b"a2"])
        other = theirs.append([b"b0"])
        second = ours.append([b"a3"])
        assert first == [0, 1, 2] and other == [3] and second == [4]
        reader = ours.open_reader(0)
        got = dict(_read(reader, 4))
        reader.close()
        assert got == {0: b"a0", 1: b"a1", 2: b"a2", 3: b"b0", 4: b"a3"}
    finally:
        ours.close()
        theirs.close()


def test_a_paused_reader_fetches_nothing_and_seeks_to_any_offset():
    topic = _topic()
    log = KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic)
    reader = log.open_reader(0)
    try:
        log.append([f"r{i}".encode() for i in range(5)])
        assert [o for o, _ in _read(reader, 4)] == [0, 1, 2, 3, 4]
        reader.pause()
        log.append([b"r5", b"r6"])
        assert reader.poll(1.0, 1000) == []  # paused: nothing comes
        reader.seek(2)
        assert [o for o, _ in _read(reader, 6)] == [2, 3, 4, 5, 6]
        reader.pause()
        reader.seek(6)
        assert _read(reader, 6) == [(6, b"r6")]
    finally:
        reader.close()
        log.close()


def _stop(*nodes: Node) -> None:
    """Stop each node and close its log (a node does not own it: its watermark probe would
    stay open)."""
    for n in nodes:
        n.stop()
    for n in nodes:
        n.log.close()


def _raw(writer_id: int, seq: int) -> bytes:
    return Entry(-1, writer_id, 1, ops.KIND, ops.put(f"w{writer_id}s{seq}", seq), seq).encode()


def test_a_leader_on_kafka_applies_its_own_records_and_reads_only_the_stale_writers():
    topic = _topic()
    log, stale = KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic), KafkaLog(
        endpoints.KAFKA_BOOTSTRAP, topic, create=False)
    leader = Node(DictKV(), log, SingleNodeElection(5), node_id="l", advertise_url="l")
    follower = Node(DictKV(), KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, create=False),
                    ManualElection({}), node_id="f", advertise_url="f")
    leader.start()
    follower.start()
    try:
        offsets = []
        for i in range(20):
            if i % 4 == 1:
                stale.append([_raw(3, i)])  # a writer deposed before 5: fenced everywhere
            offsets.append(leader.submit(ops.KIND, ops.put(f"k{i}", i), WAIT_S)
                           .result(WAIT_S).offset)
        # at most the record after each of the 5 gaps is read with it
        assert offsets == sorted(offsets) and leader.records_own >= 15
        assert follower.wait_applied(offsets[-1], WAIT_S)
        for n in (leader, follower):
            assert [n.sm.get(f"k{i}") for i in range(20)] == list(range(20))
            assert all(n.sm.get(f"w3s{i}") is None for i in range(20))
        assert leader.sm.digest() == follower.sm.digest()
        assert leader.core.fence.seq == follower.core.fence.seq
    finally:
        _stop(leader, follower)
        stale.close()


def test_sent_records_are_reported_with_their_offsets_in_the_order_sent():
    topic = _topic()
    log = KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic)
    reports: list[tuple[int, int, object]] = []
    try:
        for i in range(50):
            log.send(f"s{i}".encode(), lambda o, e, i=i: reports.append((i, o, e)))
        deadline = time.monotonic() + WAIT_S
        while len(reports) < 50 and time.monotonic() < deadline:
            log.poll_sent(0.2)
        assert [(i, o, e) for i, o, e in reports] == [(i, i, None) for i in range(50)]
        reader = log.open_reader(0)
        assert _read(reader, 49) == [(i, f"s{i}".encode()) for i in range(50)]
        reader.close()
    finally:
        log.close()


def _leader_and_follower(topic: str, **producer_conf):
    applied: list[int] = []
    leader = Node(DictKV(), KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, **producer_conf),
                  SingleNodeElection(1), node_id="l", advertise_url="l",
                  on_effects=lambda entry, _effects: applied.append(entry.offset))
    leader.applied_offsets = applied
    follower = Node(DictKV(), KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, create=False),
                    ManualElection({}), node_id="f", advertise_url="f")
    leader.start()
    follower.start()
    assert wait_for(lambda: leader.is_leader, WAIT_S)
    assert leader._sender is leader.log  # no appender thread
    return leader, follower


def test_concurrent_requests_on_kafka_are_applied_once_each_in_offset_order():
    """Four threads submit at once: each record is produced on its own thread, the loop takes
    the delivery reports; the leader applies every offset once, in order, each request's
    answer names the offset that holds its record, and the follower agrees."""
    leader, follower = _leader_and_follower(_topic())
    results: dict[bytes, object] = {}

    def client(t: int) -> None:
        for i in range(25):
            payload = ops.incr(f"c{t}", i)
            results[payload] = leader.submit(ops.KIND, payload, WAIT_S).result(WAIT_S)

    try:
        threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S * 2)
        assert len(results) == 100
        last = max(a.offset for a in results.values())
        assert last == 100 and leader.applied_offsets == list(range(101))
        assert leader.records_own >= 100 - 1
        reader = leader.log.open_reader(0)
        held = {o: Entry.decode(b, o) for o, b in _read(reader, last)}
        reader.close()
        for payload, applied in results.items():
            assert held[applied.offset].payload == payload and applied.writer_id == 1
        assert [leader.sm.get(f"c{t}") for t in range(4)] == [sum(range(25))] * 4
        assert follower.wait_applied(last, WAIT_S)
        assert follower.sm.digest() == leader.sm.digest()
    finally:
        _stop(leader, follower)


def test_a_record_the_client_refuses_fails_its_request_and_the_next_is_served():
    leader, follower = _leader_and_follower(_topic())
    try:
        with pytest.raises(AppendFailed, match="(?i)size"):  # over message.max.bytes
            leader.submit(ops.KIND, b"x" * 2_000_000, WAIT_S).result(WAIT_S)
        applied = leader.submit(ops.KIND, ops.put("k", 1), WAIT_S).result(WAIT_S)
        assert applied.offset == 1 and leader.sm.get("k") == 1
        assert follower.wait_applied(1, WAIT_S) and follower.sm.get("k") == 1
    finally:
        _stop(leader, follower)


def test_a_record_the_broker_refuses_fails_its_request_and_the_node_serves_on():
    """The client lets the record through, the broker refuses it (larger than the topic
    takes): the delivery report fails the request; the producer may be left unusable
    (idempotence), so the node replaces it, and later requests are served."""
    leader, follower = _leader_and_follower(_topic(), **{"message.max.bytes": 4_000_000})
    try:
        with pytest.raises(AppendFailed):
            leader.submit(ops.KIND, b"x" * 2_000_000, WAIT_S).result(WAIT_S)
        served = None
        for i in range(5):  # a producer left fatal refuses at once until it is replaced
            try:
                served = leader.submit(ops.KIND, ops.put("k", i), WAIT_S).result(WAIT_S)
                break
            except AppendFailed:
                time.sleep(0.2)
        assert served is not None and leader.sm.get("k") == i
        assert follower.wait_applied(served.offset, WAIT_S)
        assert follower.sm.digest() == leader.sm.digest()
    finally:
        _stop(leader, follower)


def test_a_deposed_leaders_late_record_is_fenced_and_fails_its_request(monkeypatch):
    """A leader that was not told it lost (as one paused past its session) produces after its
    successor started: its own record lands after the successor's LeaderStarted, so it reads
    across that gap, steps down, and the request fails as Fenced; every replica skips it."""
    import replog.node as node_mod

    monkeypatch.setattr(node_mod, "leader_idle_probe_s", 3600.0)  # only its gap tells it
    topic, directory = _topic(), {}
    nodes = [Node(DictKV(), KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, create=i == 0),
                  ManualElection(directory), node_id=f"n{i}", advertise_url=f"n{i}")
             for i in range(3)]
    a, b, f = nodes
    for n in nodes:
        n.start()
    try:
        a.election.elect(1)
        assert wait_for(lambda: a.is_leader, WAIT_S)
        a.submit(ops.KIND, ops.put("before", 1), WAIT_S).result(WAIT_S)
        b.election.elect(2)  # a is not deposed
        assert wait_for(lambda: b.is_leader, WAIT_S)
        assert a.is_leader
        with pytest.raises(Fenced):
            a.submit(ops.KIND, ops.put("late", 1), WAIT_S).result(WAIT_S)
        assert wait_for(lambda: a.role is Role.FOLLOWER, WAIT_S)
        ok = b.submit(ops.KIND, ops.put("after", 2), WAIT_S).result(WAIT_S)
        for n in nodes:
            assert n.wait_applied(ok.offset, WAIT_S)
            assert n.sm.get("late") is None
            assert n.sm.get("before") == 1 and n.sm.get("after") == 2
        assert a.sm.digest() == b.sm.digest() == f.sm.digest()
    finally:
        _stop(*nodes)
