"""The jobs run unchanged from the shell with a master and connector settings, reading events
from S3 through s3a (the local cluster's SeaweedFS) and from the decision log's Kafka topic,
and their values equal the online engine's."""

import io
import subprocess
import sys
import uuid

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra import spark as infra_spark
from infra.endpoints import KAFKA_BOOTSTRAP
from infra.seaweedfs import s3_client
from pipeline.feature_sets import W1
from pipeline.features import parse_definitions
from pipeline.parity import compare
from pipeline.synthetic import generate
from replog.entry import Entry
from runner.state import entries

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
WAIT_S = 15.0
EVENTS = 1_500
NAMES = [d.name for d in parse_definitions(W1)]


def run_features(source: str, out) -> dict:
    """``railflow pipeline features`` through spark-submit's entry point, in its own process."""
    conf = {"spark.jars": ",".join(str(j) for j in infra_spark.extra_jars()),
            **infra_spark.s3a_conf()}
    args = [sys.executable, "-m", "pipeline.submit", "features", "--events", source,
            "--metrics", "w1", "--out", str(out), "--master", "local[2]"]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pq.read_table(out)
    return {r["seq"]: r for r in table.select(["seq", *NAMES]).to_pylist()}


def test_features_from_s3a(tmp_path):
    rows = generate("tiny", 7).slice(0, EVENTS)
    s3 = s3_client()
    bucket = f"railflow-pipeline-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    buf = io.BytesIO()
    pq.write_table(rows, buf)
    s3.put_object(Bucket=bucket, Key="events/part-0.parquet", Body=buf.getvalue())
    try:
        offline = run_features(f"s3a://{bucket}/events/", tmp_path / "out")
    finally:
        s3.delete_object(Bucket=bucket, Key="events/part-0.parquet")
        s3.delete_bucket(Bucket=bucket)
    report = compare(rows.to_pylist(), W1, offline)
    assert report.events == EVENTS and report.mismatches == 0, report.examples


def test_features_from_the_log_topic_fenced_and_deduplicated(tmp_path):
    rows = generate("tiny", 7).slice(0, EVENTS).to_pylist()
    topic = f"railflow-log-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": KAFKA_BOOTSTRAP})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic] \
        .result(WAIT_S)
    producer = Producer({"bootstrap.servers": KAFKA_BOOTSTRAP, "enable.idempotence": True,
                         "acks": "all"})
    applied = []  # what apply ingests: (offset, ts, data)
    offset = 0

    def append(writer_id, r, counts):
        nonlocal offset
        data = {k: v for k, v in r.items() if k not in ("event_id", "seq", "ts")}
        payload = entries.encode({"event_id": r["event_id"], "type": "order", "data": data})
        producer.produce(topic, Entry(offset, writer_id, r["ts"], "EventReceived",
                                      payload).encode(), partition=0)
        if counts:
            applied.append({**data, "seq": offset, "ts": r["ts"]})
        offset += 1

    for i, r in enumerate(rows):
        writer = 1 if i < EVENTS // 2 else 2
        append(writer, r, True)
        if i == EVENTS // 2 + 10:
            append(1, rows[i + 1], False)  # a deposed leader's late write: fenced
        if i == 100:
            append(writer, rows[50], False)  # the same event_id again: a duplicate
    assert producer.flush(WAIT_S) == 0
    try:
        offline = run_features(f"kafka://{KAFKA_BOOTSTRAP}/{topic}", tmp_path / "out")
    finally:
        admin.delete_topics([topic])[topic].result(WAIT_S)
    assert sorted(offline) == [a["seq"] for a in applied]
    report = compare(applied, W1, offline)
    assert report.events == EVENTS and report.mismatches == 0, report.examples
