"""The cluster log: one Kafka topic with one partition, via confluent-kafka.

The producer is idempotent with ``acks=all`` (no duplicates or reordering on retry) and a
small linger, tuned for latency; ``append`` is one group commit (produce all, one flush). The
reader uses ``assign()`` on partition 0 from an offset, with no consumer group and no commits:
where to resume is the node's business (checkpoint offset + 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replog.errors import AppendFailed, AppendTimeout

PARTITION = 0
linger_ms = 0
append_timeout_s = 10.0  # a flush that takes longer fails its requests (indeterminate)
fetch_wait_max_ms = 5  # how long the broker may hold an empty fetch; bounds idle latency
reconnect_backoff_max_ms = 1000  # after a broker restart, reconnect within a second


def ensure_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Create the topic with one partition and replication 1, unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=timeout_s
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class KafkaLog:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        create: bool = True,
        log_level: int = 6,
        **producer_conf,
    ):
        self.bootstrap = bootstrap
        self.topic = topic
        self.log_level = log_level  # librdkafka syslog level: 6 info, 3 errors, 0 silent
        if create:
            ensure_topic(bootstrap, topic)
        conf = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "message.timeout.ms": int(append_timeout_s * 1000),
            "socket.nagle.disable": True,
            "reconnect.backoff.max.ms": reconnect_backoff_max_ms,
            "log_level": log_level,
            "error_cb": self._on_error,
        }
        conf.update(producer_conf)
        self._conf = conf
        self._fatal: str | None = None
        self._producer = Producer(conf)
        self._readers: list[KafkaLogReader] = []

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():  # e.g. the idempotent producer lost its sequence: it is unusable now
            self._fatal = str(err)

    def append(self, records: Sequence[bytes]) -> None:
        if self._fatal is not None:
            # A fresh producer (new producer id) instead of failing every append from now on;
            # ordering across the two is safe: the appender sends one group at a time.
            self._fatal = None
            self._producer = Producer(self._conf)
        errors: list[str] = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                errors.append(str(err))

        for r in records:
            self._producer.produce(self.topic, r, partition=PARTITION, on_delivery=on_delivery)
        remaining = self._producer.flush(append_timeout_s)
        if remaining:
            raise AppendTimeout(f"{remaining} records not delivered in {append_timeout_s} s")
        if errors:
            raise AppendFailed(errors[0])

    def open_reader(self, start_offset: int) -> KafkaLogReader:
        reader = KafkaLogReader(self.bootstrap, self.topic, start_offset, self.log_level)
        self._readers.append(reader)
        return reader

    def close(self) -> None:
        self._producer.flush(1.0)


class KafkaLogReader:
    def __init__(self, bootstrap: str, topic: str, start_offset: int, log_level: int = 6):
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                # Required by the client even without subscribe(); never joined or committed.
                "group.id": f"replog-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": fetch_wait_max_ms,
                "fetch.min.bytes": 1,
                "socket.nagle.disable": True,
                "enable.partition.eof": False,
                # Never skip silently to the end or the start: a gap would diverge the replica.
                "auto.offset.reset": "error",
                "reconnect.backoff.max.ms": reconnect_backoff_max_ms,
                "log_level": log_level,
            }
        )
        self._consumer.assign([TopicPartition(topic, PARTITION, start_offset)])

    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        # consume(n, timeout) waits until n messages or the timeout: wait for the first one
        # only, then take what is already fetched without waiting.
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        msgs = [first]
        if records_max > 1:
            msgs += self._consumer.consume(records_max - 1, 0)
        out: list[tuple[int, bytes]] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.retriable() or err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            out.append((msg.offset(), msg.value()))  # type: ignore[arg-type]
        return out

    def close(self) -> None:
        self._consumer.close()
