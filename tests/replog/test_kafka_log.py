"""On the real Kafka: an append says where each record landed, a reader pauses and seeks, and
a leader applies its own records without reading them back, reading only the gaps a stale
writer left between them, as its followers apply everything they read."""

from __future__ import annotations

import time
import uuid

import pytest

from infra import endpoints
from replog import Node
from replog.entry import Entry
from replog.kafka import KafkaLog
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV
from replog.testing.memlog import ManualElection

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
        leader.stop()
        follower.stop()
        stale.close()
