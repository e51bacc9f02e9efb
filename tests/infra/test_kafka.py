"""Kafka round trips through confluent-kafka: idempotent acks=all producer, assign() consumer."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from infra.endpoints import KAFKA_BOOTSTRAP

pytestmark = pytest.mark.cluster
WAIT_S = 15.0
MESSAGES = 20
START_OFFSET = 7


@pytest.fixture
def topic():
    admin = AdminClient({"bootstrap.servers": KAFKA_BOOTSTRAP})
    name = f"railflow-test-{uuid.uuid4().hex[:12]}"
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    futures[name].result(WAIT_S)
    yield name
    admin.delete_topics([name])[name].result(WAIT_S)


def test_idempotent_producer_then_assign_from_an_offset(topic):
    producer = Producer({"bootstrap.servers": KAFKA_BOOTSTRAP, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 1})
    offsets: list[int] = []

    def delivered(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for i in range(MESSAGES):
        producer.produce(topic, key=str(i).encode(), value=f"entry-{i}".encode(),
                         on_delivery=delivered)
    assert producer.flush(WAIT_S) == 0
    assert offsets == list(range(MESSAGES))  # one partition, in order, no duplicates

    consumer = Consumer({"bootstrap.servers": KAFKA_BOOTSTRAP, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "session.timeout.ms": 2000})
    try:
        consumer.assign([TopicPartition(topic, 0, START_OFFSET)])
        got: list[tuple[int, bytes]] = []
        while len(got) < MESSAGES - START_OFFSET:
            msg = consumer.poll(WAIT_S)
            assert msg is not None, f"timed out after {len(got)} messages"
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
        assert got == [(i, f"entry-{i}".encode()) for i in range(START_OFFSET, MESSAGES)]
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT_S)
        assert (low, high) == (0, MESSAGES)
    finally:
        consumer.close()
