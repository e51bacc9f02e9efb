"""On the real Kafka: the topic's retention follows the checkpoint interval, and a node whose
start offset was deleted refuses to start instead of replaying what is left."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from infra import endpoints
from replog import LogTruncated, Node
from replog.entry import Entry
from replog.kafka import KafkaLog, retention_bytes_for, topic_settings
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV

pytestmark = pytest.mark.cluster


def _topic() -> str:
    return f"replog-retention-{uuid.uuid4().hex[:10]}"


def test_retention_is_set_by_size_from_the_checkpoint_interval():
    topic = _topic()
    needed = retention_bytes_for(every_entries=1000, retain=3, entry_bytes_max=4096)
    assert needed >= 4 * 1000 * 4096
    KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, retention_bytes=needed).close()
    conf = topic_settings(endpoints.KAFKA_BOOTSTRAP, topic)
    assert conf["retention.ms"] == "-1" and conf["retention.bytes"] == str(needed)
    # An existing topic is brought in line too.
    KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic, retention_bytes=needed * 2).close()
    assert topic_settings(endpoints.KAFKA_BOOTSTRAP, topic)["retention.bytes"] == str(needed * 2)


def test_a_node_whose_start_offset_was_deleted_refuses_to_start():
    topic = _topic()
    log = KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic)
    try:
        log.append([Entry(-1, 1, 1, ops.KIND, ops.put(f"k{i}", i), i).encode()
                    for i in range(10)])
        admin = AdminClient({"bootstrap.servers": endpoints.KAFKA_BOOTSTRAP})
        for fut in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
            fut.result(timeout=30)
        assert log.first_offset() == 6 and log.tail_offset() == 10
        node = Node(DictKV(), log, SingleNodeElection(), node_id="n", advertise_url="x",
                    start_offset=0)
        with pytest.raises(LogTruncated):
            node.start()
        ok = Node(DictKV(), log, SingleNodeElection(), node_id="m", advertise_url="y",
                  start_offset=6)
        ok.start()
        try:
            assert ok.wait_applied(9, 30) and ok.sm.get("k9") == 9
        finally:
            ok.stop()
    finally:
        log.close()  # its watermark probe, which the nodes do not own
