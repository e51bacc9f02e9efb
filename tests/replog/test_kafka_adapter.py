"""The Kafka adapter's failure mapping, against a broker that is not there (no cluster)."""

import time

import pytest

from replog import AppendFailed, AppendTimeout, Node, kafka
from replog.kafka import KafkaLog
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV

DEAD_BROKER = "127.0.0.1:1"  # nothing listens on port 1


def test_append_to_an_unreachable_broker_fails_instead_of_hanging():
    log = KafkaLog(DEAD_BROKER, "t", create=False, log_level=0, **{"message.timeout.ms": 300})
    with pytest.raises((AppendFailed, AppendTimeout)):
        log.append([b"x"])


def test_an_append_that_timed_out_leaves_a_fresh_producer_for_the_next():
    log = KafkaLog(DEAD_BROKER, "t", create=False, log_level=0, **{"message.timeout.ms": 300})
    stuck = log._producer
    with pytest.raises((AppendFailed, AppendTimeout)):
        log.append([b"x"])
    assert log._producer is not stuck


def test_a_sent_record_that_times_out_is_reported_and_the_next_send_has_a_fresh_producer():
    log = KafkaLog(DEAD_BROKER, "t", create=False, log_level=0, **{"message.timeout.ms": 300})
    stuck = log._producer
    reports = []
    log.send(b"x", lambda offset, error: reports.append((offset, error)))
    deadline = time.monotonic() + 10
    while not reports and time.monotonic() < deadline:
        log.poll_sent(0.1)
    ((offset, error),) = reports
    assert offset == -1 and isinstance(error, AppendTimeout)
    assert log._producer is stuck  # not replaced inside the delivery callback
    log.send(b"y", lambda offset, error: reports.append((offset, error)))
    assert log._producer is not stuck


def test_reader_on_an_unreachable_broker_returns_nothing():
    log = KafkaLog(DEAD_BROKER, "t", create=False, log_level=0, **{"message.timeout.ms": 300})
    reader = log.open_reader(0)
    assert reader.poll(0.2, 10) == []
    reader.close()


def test_node_whose_log_is_down_fails_requests_and_never_acknowledges():
    log = KafkaLog(DEAD_BROKER, "t", create=False, log_level=0, **{"message.timeout.ms": 300})
    node = Node(DictKV(), log, SingleNodeElection(), node_id="n", advertise_url="x")
    node.start()
    try:
        fut = node.submit(ops.KIND, ops.put("k", 1), timeout_s=2.0)
        # LeaderStarted cannot be appended, so the request waits queued and times out.
        with pytest.raises(AppendTimeout):
            fut.result(10)
        assert not node.is_leader and node.sm.get("k") is None
    finally:
        node.stop()
        log.close()


def test_producer_and_reader_are_tuned_for_one_record_latency():
    producer = kafka.producer_config(DEAD_BROKER)
    assert producer["linger.ms"] == 0 and producer["socket.nagle.disable"]
    assert producer["acks"] == "all" and producer["enable.idempotence"]
    # a group commit by the client: what is sent while a request is in flight goes in the next
    assert producer["max.in.flight.requests.per.connection"] == 1
    consumer = kafka.consumer_config(DEAD_BROKER)
    assert consumer["fetch.min.bytes"] == 1 and consumer["socket.nagle.disable"]
    assert consumer["auto.offset.reset"] == "error" and not consumer["enable.auto.commit"]
    # an idle held fetch is answered at the first appended record: the wait bounds idle only
    assert consumer["fetch.wait.max.ms"] <= kafka.append_timeout_s * 1000
    assert kafka.consumer_config(DEAD_BROKER)["group.id"] != consumer["group.id"]
