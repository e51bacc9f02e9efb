"""The cluster log: one Kafka topic with one partition, via confluent-kafka.

The producer is idempotent with ``acks=all`` (no duplicates or reordering on retry). Two ways
to write: ``send`` produces one record and returns at once (``replog.protocols.SendingLog``:
a leader produces on the thread that submitted the request, and its apply loop waits in
``poll_sent``, which serves the delivery reports with each record's offset); ``append`` is one
group commit (produce all, one flush) that returns the offsets (an appender thread's, kept to
measure against). Either way the leader applies its records without reading them back. The
reader uses ``assign()`` on partition 0 from an offset, with no consumer group and no commits:
where to resume is the node's business (checkpoint offset + 1); ``seek`` assigns anew,
``pause`` unassigns, so a leader's reader fetches only while it reads a gap.

Tuned for the latency of one record, not for throughput (``producer_config`` and
``consumer_config``; ``bench/replog_rtt.py`` measures them against librdkafka's defaults and a
bare produce → consume in the same run): no linger (a record is produced when its request
comes; an appender's group commit batches whatever queued meanwhile), Nagle off on both
sockets, a fetch the broker answers as soon as one byte is there, and a consume that waits for
the first record only and then takes every record already fetched in one call.

Retention: the topic deletes by size only (``retention.ms=-1``), with ``retention.bytes`` chosen
by the caller so that the log always holds more entries than its oldest kept checkpoint needs
(``retention_bytes_for``). ``first_offset()`` says where the log starts now, so a node whose
start offset was deleted refuses to start (``replog.LogTruncated``) instead of diverging.
``tail_offset()`` says where it ends, so a node can tell a stuck reader from an idle log.

Every consumer made here (a reader, a log's watermark probe) is closed by its owner: the
reader by ``close()``, the probe by ``KafkaLog.close()``. One left open keeps connecting to
its broker for as long as it lives; ``open_consumers()`` lists those alive and not closed,
with the test that opened each (pytest's ``PYTEST_CURRENT_TEST``), for the test suite's check.
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from replog.errors import AppendFailed, AppendTimeout, LogTruncated
from replog.protocols import OnSent

PARTITION = 0
linger_ms = 0
# One produce request in flight at a time: records sent while it waits for the broker go out
# together in the next one, a group commit made by the client (as the appender thread made
# it). Five in flight (the idempotent producer's most) sent a request per record at 500/s,
# and each request costs the client's threads and the broker.
max_in_flight = 1
append_timeout_s = 10.0  # a flush that takes longer fails its requests (indeterminate)
# How long the broker may hold a fetch that found nothing. With fetch.min.bytes=1 the broker
# answers a held fetch the moment a record is appended, so this bounds only idle round trips:
# a few ms costs every idle replica hundreds of fetches per second for no latency.
fetch_wait_max_ms = 100
# Readers and logs with a probe, open (not closed) and alive, each with what opened it.
_open: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def _opened(owner: object, what: str) -> None:
    by = os.environ.get("PYTEST_CURRENT_TEST")
    _open[owner] = what + (f", opened by {by}" if by else "")


def open_consumers() -> list[str]:
    """The Kafka consumers made here that are alive and not closed (readers and watermark
    probes), each described with its topic and what opened it."""
    return sorted(_open.values())


def close_open_consumers() -> None:
    """Close every consumer ``open_consumers`` lists (the test suite's cleanup after a leak)."""
    for owner in list(_open.keys()):
        owner.close()  # type: ignore[attr-defined]
# A follower's fetch waits for a few records instead of one: its entries are applied up to
# this much later (a forwarded request's read-your-write too), for several times fewer fetches
# (one per record cost a follower about a third of its CPU per order in librdkafka's threads).
# 10 ms rather than 5: half the fetches and node-loop wakeups again (~5 records each at
# 500/s, ~10 at 1,000/s), for up to 5 ms more before a follower applies an entry (a request
# forwarded through a follower pays that; one sent to the leader does not). Measured side by
# side by ``bench/follower_fetch.py`` (CPU per record and delivery delay per setting).
# A leader reads only across gaps in its own records, with the leader's settings.
follower_fetch_wait_max_ms = 10
follower_fetch_min_bytes = 16 * 1024
fetch_error_backoff_ms = 20  # after a fetch error (e.g. a broker restart); default 500
retry_backoff_ms = 20  # before the producer retries a failed request; default 100
reconnect_backoff_max_ms = 1000  # after a broker restart, reconnect within a second


def producer_config(bootstrap: str, log_level: int = 6) -> dict:
    """The producer's settings: durable (idempotent, acks=all) and sent at once."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        "max.in.flight.requests.per.connection": max_in_flight,
        "message.timeout.ms": int(append_timeout_s * 1000),
        "socket.nagle.disable": True,
        "retry.backoff.ms": retry_backoff_ms,
        "reconnect.backoff.max.ms": reconnect_backoff_max_ms,
        "log_level": log_level,
    }


def consumer_config(bootstrap: str, log_level: int = 6, *, follower: bool = False) -> dict:
    """The reader's settings: every record as soon as the broker has it (a follower's: within
    ``follower_fetch_wait_max_ms``), never a gap."""
    return {
        "bootstrap.servers": bootstrap,
        # Required by the client even without subscribe(); never joined or committed.
        "group.id": f"replog-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": follower_fetch_wait_max_ms if follower else fetch_wait_max_ms,
        "fetch.min.bytes": follower_fetch_min_bytes if follower else 1,
        "fetch.error.backoff.ms": fetch_error_backoff_ms,
        "socket.nagle.disable": True,
        "enable.partition.eof": False,
        # Never skip silently to the end or the start: a gap would diverge the replica.
        "auto.offset.reset": "error",
        "reconnect.backoff.max.ms": reconnect_backoff_max_ms,
        "log_level": log_level,
    }


segment_bytes = 64 * 1024 * 1024  # retention deletes whole segments: keep them small


def retention_bytes_for(every_entries: int, retain: int, entry_bytes_max: int) -> int:
    """A ``retention.bytes`` under which the log still holds every entry after the oldest
    of ``retain`` checkpoints taken each ``every_entries`` entries of at most
    ``entry_bytes_max`` bytes, plus one interval in progress and one open segment."""
    return (retain + 1) * every_entries * entry_bytes_max + 2 * segment_bytes


def topic_config(retention_bytes: int | None) -> dict[str, str]:
    if retention_bytes is None:
        return {}
    return {
        "cleanup.policy": "delete",
        "retention.ms": "-1",  # time never deletes: only size, which the checkpoints bound
        "retention.bytes": str(retention_bytes),
        "segment.bytes": str(segment_bytes),
    }


def ensure_topic(
    bootstrap: str, topic: str, timeout_s: float = 30.0, retention_bytes: int | None = None
) -> None:
    """Create the topic with one partition and replication 1, unless it exists; with
    ``retention_bytes``, set (or reset) its retention to it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = topic_config(retention_bytes)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config=config)],
        request_timeout=timeout_s,
    )
    try:
        futures[topic].result(timeout=timeout_s)
        return
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    if config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in config.items()]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(timeout=timeout_s)


def topic_settings(bootstrap: str, topic: str, timeout_s: float = 30.0) -> dict[str, str]:
    """The topic's effective configuration (for checks and tests)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
    return {name: entry.value for name, entry in configs.items()}


class KafkaLog:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        create: bool = True,
        log_level: int = 6,
        retention_bytes: int | None = None,
        **producer_conf,
    ):
        self.bootstrap = bootstrap
        self.topic = topic
        self.log_level = log_level  # librdkafka syslog level: 6 info, 3 errors, 0 silent
        if create:
            ensure_topic(bootstrap, topic, retention_bytes=retention_bytes)
        conf = {**producer_config(bootstrap, log_level), "error_cb": self._on_error}
        conf.update(producer_conf)
        self._conf = conf
        self._fatal: str | None = None
        # A record timed out: the producer may be stuck re-acquiring its producer id from a
        # restarted broker ("coordinator load in progress"); the next write starts a fresh one.
        self._stale = False
        self._producer = Producer(conf)
        # Held while producing or replacing the producer: ``send`` runs on whichever thread
        # submitted, and a record must never go to a producer being replaced.
        self._send_lock = threading.Lock()
        self._probe: Consumer | None = None  # asks the broker for the watermarks
        self._probe_lock = threading.Lock()  # the appender and the loop may both ask

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():  # e.g. the idempotent producer lost its sequence: it is unusable now
            self._fatal = str(err)

    def _renew_if_unusable(self) -> None:
        """Under ``_send_lock``: a fresh producer (new producer id) instead of failing every
        write from now on. What the old one still holds is purged and reported failed
        (indeterminate: the broker may have it); a record of the old producer that lands
        after one of the new is a smaller seq of the same writer, which every replica skips."""
        if self._fatal is not None or self._stale:
            self._fatal, self._stale = None, False
            self._replace_producer()

    def send(self, record: bytes, on_sent: OnSent) -> None:
        """Produce ``record`` without waiting; ``on_sent(offset, error)`` runs from
        ``poll_sent`` once the broker acknowledged it (or from the thread that replaced the
        producer, for a record it purged). Raises what the client raises at once (a full
        queue, a record over ``message.max.bytes``, a fatal producer)."""

        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is None:
                on_sent(msg.offset(), None)
            elif err.code() == KafkaError._MSG_TIMED_OUT:
                self._stale = True
                on_sent(-1, AppendTimeout(f"not delivered in {append_timeout_s} s: {err}"))
            else:
                on_sent(-1, AppendFailed(str(err)))

        with self._send_lock:
            self._renew_if_unusable()
            self._producer.produce(self.topic, record, partition=PARTITION,
                                   on_delivery=on_delivery)

    def poll_sent(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for delivery reports and serve them on this thread."""
        return self._producer.poll(timeout_s)

    def append(self, records: Sequence[bytes]) -> list[int] | None:
        errors: list[KafkaError] = []
        offsets: list[int] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        with self._send_lock:  # ordering across producers: one group at a time is in flight
            self._renew_if_unusable()
            producer = self._producer
            for r in records:
                producer.produce(self.topic, r, partition=PARTITION, on_delivery=on_delivery)
        remaining = producer.flush(append_timeout_s)
        timed_out = remaining or any(e.code() == KafkaError._MSG_TIMED_OUT for e in errors)
        if timed_out:
            # A producer that could not deliver for the whole timeout may be stuck: the next
            # append starts a fresh one, as a new client would. The failed group is
            # indeterminate either way, so dropping what the old one still holds is safe.
            with self._send_lock:
                if self._producer is producer:
                    self._replace_producer()
        if remaining:
            raise AppendTimeout(f"{remaining} records not delivered in {append_timeout_s} s")
        if errors:
            raise AppendFailed(str(errors[0]))
        # The idempotent producer keeps one partition's records in the order produced, so the
        # sorted offsets are the records' in order, whatever order the reports came in.
        offsets.sort()
        if len(offsets) != len(records) or (offsets and offsets[0] < 0):  # no offset given
            return None
        return offsets

    def _replace_producer(self) -> None:
        old, self._producer = self._producer, Producer(self._conf)
        old.purge()
        old.flush(0)

    def first_offset(self, timeout_s: float = 2.0) -> int:
        """The oldest offset the log still holds (retention moves it forward)."""
        return self._watermarks(timeout_s)[0]

    def tail_offset(self, timeout_s: float = 1.0) -> int:
        """The offset the next append will take: a reader behind it has records to read."""
        return self._watermarks(timeout_s)[1]

    def _watermarks(self, timeout_s: float) -> tuple[int, int]:
        # A client of its own, kept open: the readers' clients may be the ones that are stuck.
        with self._probe_lock:
            if self._probe is None:
                self._probe = Consumer({"bootstrap.servers": self.bootstrap,
                                        "group.id": f"replog-{uuid.uuid4().hex}",
                                        "enable.auto.commit": False, "log_level": self.log_level})
                _opened(self, f"the watermark probe of {self.topic} at {self.bootstrap}")
            try:
                return self._probe.get_watermark_offsets(
                    TopicPartition(self.topic, PARTITION), timeout=timeout_s, cached=False)
            except Exception:
                self._probe.close()  # a client that lost its broker is made anew next time
                self._probe = None
                _open.pop(self, None)
                raise

    def open_reader(self, start_offset: int, *, follower: bool = False) -> KafkaLogReader:
        return KafkaLogReader(self.bootstrap, self.topic, start_offset, self.log_level,
                              follower=follower)

    def close(self) -> None:
        self._producer.flush(1.0)
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
                self._probe = None
                _open.pop(self, None)


class KafkaLogReader:
    def __init__(self, bootstrap: str, topic: str, start_offset: int, log_level: int = 6,
                 *, follower: bool = False, **consumer_conf):
        self._topic = topic
        self._consumer = Consumer({**consumer_config(bootstrap, log_level, follower=follower),
                                   **consumer_conf})
        self._consumer.assign([TopicPartition(topic, PARTITION, start_offset)])
        self._closed = False
        _opened(self, f"a reader of {topic} at {bootstrap} from offset {start_offset}")

    def seek(self, offset: int) -> None:
        # A new assignment, not ``Consumer.seek`` (refused on a partition not being fetched):
        # the client's connection stays, the fetch starts at ``offset``, and messages of the
        # old assignment still queued are dropped by the client (a stale one would only repeat
        # an offset, which the node skips).
        self._consumer.assign([TopicPartition(self._topic, PARTITION, offset)])

    def pause(self) -> None:
        self._consumer.unassign()  # no partition, no fetch: the client only keeps its socket

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
                if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    raise LogTruncated(f"the log lost offsets this node still needs: {err}")
                raise KafkaException(err)
            out.append((msg.offset(), msg.value()))  # type: ignore[arg-type]
        return out

    def close(self) -> None:
        """Close the client (once: a second call does nothing)."""
        if not self._closed:
            self._closed = True
            _open.pop(self, None)
            self._consumer.close()
