"""Apache Kafka (the real broker from Maven Central), one KRaft node on 127.0.0.1:9092.

One JVM is both broker and controller (controller on 9093). Tuned for tests: internal topics
have one replica and one partition, a new consumer group starts without the 3 s rebalance
delay, topics are created on first use, and clients may ask for 1 s group sessions.
"""

import base64
import subprocess
import uuid

from infra import jars, java, paths
from infra.configs import write_properties
from infra.endpoints import HOST, KAFKA_BOOTSTRAP, KAFKA_CONTROLLER_PORT
from infra.errors import InfraError
from infra.server import Process, Server

PORT = int(KAFKA_BOOTSTRAP.rsplit(":", 1)[1])
HEAP_MB = 1024
NODE_ID = 1
FORMAT_TIMEOUT_S = 120
PROBE_TOPIC = "_railflow_infra_probe"
PROBE_TIMEOUT_S = 5.0


class Kafka(Server):
    name = "kafka"
    processes = (Process("kafka", (PORT, KAFKA_CONTROLLER_PORT), stop_grace_s=30),)
    start_timeout_s = 120

    def prepare(self) -> None:
        jars.ensure("kafka")
        conf = paths.conf_dir(self.name)
        data = paths.data_dir(self.name)
        write_properties(conf / "server.properties", {
            "process.roles": "broker,controller",
            "node.id": NODE_ID,
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{KAFKA_CONTROLLER_PORT}",
            "listeners": f"PLAINTEXT://{HOST}:{PORT},CONTROLLER://{HOST}:{KAFKA_CONTROLLER_PORT}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{PORT}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": data,
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "auto.create.topics.enable": True,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000,
            "group.consumer.min.session.timeout.ms": 1000,
            "group.consumer.min.heartbeat.interval.ms": 500,
            # One partition's producer and three consumers: one network thread and two request
            # handlers (were 2 and 4) used less of the broker's CPU in each of three one-minute
            # A/B pairs at 1,000 orders/s (docs/latency.md, "The cluster's JVMs under load").
            "num.network.threads": 1,
            "num.io.threads": 2,
            "log.retention.hours": 24,
            "log.segment.bytes": 64 * 1024 * 1024,
            "delete.topic.enable": True,
        })
        (conf / "log4j2.properties").write_text(_LOG4J2)
        if not (data / "meta.properties").exists():
            self._format(conf, data)

    def _format(self, conf, data) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        argv = java.argv("kafka.tools.StorageTool", jars.classpath("kafka"), 256,
                         props=self._props(conf),
                         args=["format", "-t", cluster_id, "-c", str(conf / "server.properties"),
                               "--ignore-formatted"])
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S)
        if proc.returncode != 0:
            raise InfraError(f"kafka storage format failed:\n{proc.stdout}\n{proc.stderr}")

    def _props(self, conf) -> dict[str, str]:
        return {"log4j2.configurationFile": str(conf / "log4j2.properties"),
                "kafka.logs.dir": str(paths.LOG_DIR)}

    def argv(self, process: Process) -> list[str]:
        conf = paths.conf_dir(self.name)
        return java.argv("kafka.Kafka", jars.classpath("kafka"), HEAP_MB,
                         props=self._props(conf), args=[str(conf / "server.properties")])

    def probe(self) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition

        token = uuid.uuid4().hex.encode()
        delivered: list = []
        producer = Producer({"bootstrap.servers": KAFKA_BOOTSTRAP, "enable.idempotence": True,
                             "acks": "all", "message.timeout.ms": int(PROBE_TIMEOUT_S * 1000)})
        producer.produce(PROBE_TOPIC, value=token,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
        producer.flush(PROBE_TIMEOUT_S)
        if not delivered or delivered[0][0] is not None:
            raise RuntimeError(f"produce failed: {delivered}")
        msg = delivered[0][1]
        consumer = Consumer({"bootstrap.servers": KAFKA_BOOTSTRAP, "group.id": "railflow-infra",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(PROBE_TOPIC, msg.partition(), msg.offset())])
            got = consumer.poll(PROBE_TIMEOUT_S)
            if got is None or got.error() or got.value() != token:
                raise RuntimeError(f"consume read back {got and (got.error() or got.value())!r}")
        finally:
            consumer.close()


_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""
