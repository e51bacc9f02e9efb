"""Spark (pyspark, local mode) reads a Parquet file from S3 through s3a and a Kafka topic,
with the connector jars from the project's Maven cache (no download at run time)."""

import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra import spark as infra_spark
from infra.endpoints import KAFKA_BOOTSTRAP
from infra.seaweedfs import s3_client

pytestmark = pytest.mark.cluster
WAIT_S = 15.0
ROWS = 1000


@pytest.fixture(scope="module")
def spark():
    session = infra_spark.session("railflow-infra-smoke", master="local[1]", quick_start=True)
    yield session
    session.stop()


def test_spark_jars_come_from_the_local_cache_only():
    conf = infra_spark.session_conf()
    jars = conf["spark.jars"].split(",")
    assert any("spark-sql-kafka-0-10" in j for j in jars)
    assert any("hadoop-aws" in j for j in jars)
    assert all(j.startswith("/") and j.endswith(".jar") for j in jars)
    assert "spark.jars.packages" not in conf  # nothing resolved from the internet


def test_read_parquet_from_s3(spark):
    s3 = s3_client()
    bucket = f"railflow-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    table = pa.table({"card": [f"c{i % 10}" for i in range(ROWS)],
                      "amount": list(range(ROWS))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    s3.put_object(Bucket=bucket, Key="events/part-0.parquet", Body=buf.getvalue())
    try:
        df = spark.read.parquet(f"s3a://{bucket}/events/")
        totals = {r["card"]: r["total"] for r in
                  df.groupBy("card").agg({"amount": "sum"})
                    .withColumnRenamed("sum(amount)", "total").collect()}
        assert totals == {f"c{k}": sum(range(k, ROWS, 10)) for k in range(10)}
    finally:
        s3.delete_object(Bucket=bucket, Key="events/part-0.parquet")
        s3.delete_bucket(Bucket=bucket)


def test_read_kafka_topic(spark):
    topic = f"railflow-test-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": KAFKA_BOOTSTRAP})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic] \
        .result(WAIT_S)
    producer = Producer({"bootstrap.servers": KAFKA_BOOTSTRAP, "enable.idempotence": True,
                         "acks": "all"})
    for i in range(50):
        producer.produce(topic, value=f"e{i}".encode())
    assert producer.flush(WAIT_S) == 0
    try:
        rows = (spark.read.format("kafka")
                .option("kafka.bootstrap.servers", KAFKA_BOOTSTRAP)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("endingOffsets", "latest")
                .load()
                .selectExpr("offset", "CAST(value AS STRING) AS v")
                .orderBy("offset").collect())
        assert [(r["offset"], r["v"]) for r in rows] == [(i, f"e{i}") for i in range(50)]
    finally:
        admin.delete_topics([topic])[topic].result(WAIT_S)
