"""Where the jobs read events: Parquet anywhere Spark reaches, or the decision log's Kafka topic.

``read_events(spark, source)`` takes
- a Parquet path or URL: a local path, ``s3a://bucket/prefix`` (S3, SeaweedFS locally) or
  ``hdfs://namenode:port/path``; Spark's Hadoop connectors read it, on one machine or a cluster;
- ``kafka://host:port/topic``: the runner's replicated log. Its ``EventReceived`` entries
  become events exactly as apply saw them: ``ts`` is the leader's stamp, ``seq`` the log
  offset, entries of a fenced writer (a ``writer_id`` below the largest seen before them) are
  dropped, and only the first entry of an ``event_id`` counts. The payload's ``data`` fields
  become columns, typed from the first ``schema_sample_entries`` events (int, float, str,
  bool; a field of mixed types is refused with its name, nested values are left out).

Decoding the log is a seam over ``replog.entry`` and ``runner.state.entries`` (the log's own
envelope and payload codecs) so the job reads what the nodes apply. The caller's session must
carry the Kafka and S3A connector jars (``pipeline.session``: ``--jars`` / ``--conf``, or
spark-submit's).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from pipeline.ordering import SEQ, TS, InvariantViolation

EVENT_RECEIVED = "EventReceived"
schema_sample_entries = 1_000
_TYPES = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}


def read_events(spark: SparkSession, source: str) -> DataFrame:
    """Events of ``source`` (a Parquet path/URL or ``kafka://host:port/topic``)."""
    if source.startswith("kafka://"):
        url = urlparse(source)
        topic = url.path.strip("/")
        if not url.netloc or not topic:
            raise InvariantViolation(f"kafka source must be kafka://host:port/topic: {source}")
        return read_log(spark, url.netloc, topic)
    return spark.read.parquet(source)


def _entries(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    return (spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .select(F.col("offset").alias(SEQ), "value"))


def _decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """(seq, value) -> (seq, writer_id, ts, kind, event_id, data as JSON)."""
    import orjson

    from replog.entry import Entry
    from runner.state import entries

    for batch in batches:
        out: dict[str, list] = {"seq": [], "writer_id": [], "ts": [], "kind": [],
                                "event_id": [], "data": []}
        for seq, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(),
                              strict=True):
            e = Entry.decode(value, seq)
            out["seq"].append(seq)
            out["writer_id"].append(e.writer_id)
            out["ts"].append(e.ts)
            out["kind"].append(e.kind)
            if e.kind == EVENT_RECEIVED:
                p = entries.decode(e.payload, e.kind)
                out["event_id"].append(p.get("event_id"))
                out["data"].append(orjson.dumps(p.get("data") or {}).decode())
            else:
                out["event_id"].append(None)
                out["data"].append(None)
        yield pa.RecordBatch.from_pydict(out, schema=_DECODED)


_DECODED = pa.schema([("seq", pa.int64()), ("writer_id", pa.int64()), ("ts", pa.int64()),
                      ("kind", pa.string()), ("event_id", pa.string()), ("data", pa.string())])


def _data_schema(samples: list[str]) -> pa.Schema:
    import orjson

    types: dict[str, set] = {}
    for text in samples:
        for k, v in orjson.loads(text).items():
            if v is not None and type(v) in _TYPES:
                types.setdefault(k, set()).add(type(v))
    fields = []
    for k, ts in types.items():
        if k in (SEQ, TS, "event_id"):
            continue
        if len(ts) > 1:
            raise InvariantViolation(f"event field {k!r} holds values of several types "
                                     f"({sorted(t.__name__ for t in ts)}): give a Parquet export")
        fields.append(pa.field(k, _TYPES[ts.pop()]))
    return pa.schema(fields)


def _flatten(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    import orjson

    wanted = {f.name: next(t for t, at in _TYPES.items() if at == f.type) for f in schema}
    for batch in batches:
        data = [orjson.loads(x) for x in batch.column(batch.schema.get_field_index("data"))
                .to_pylist()]
        arrays = [batch.column(batch.schema.get_field_index(c)) for c in (SEQ, TS, "event_id")]
        for f in schema:
            values = [d.get(f.name) for d in data]
            bad = next((v for v in values if v is not None and type(v) is not wanted[f.name]),
                       None)
            if bad is not None:
                raise InvariantViolation(f"event field {f.name!r} holds a "
                                         f"{type(bad).__name__}, earlier events a "
                                         f"{wanted[f.name].__name__}: give a Parquet export")
            arrays.append(pa.array(values, f.type))
        yield pa.RecordBatch.from_arrays(arrays, names=[SEQ, TS, "event_id", *schema.names])


def read_log(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The ``EventReceived`` events of the log topic, fenced and deduplicated as apply does."""
    from pyspark.sql.pandas.types import from_arrow_schema

    decoded = _entries(spark, bootstrap, topic).mapInArrow(
        _decode, from_arrow_schema(_DECODED)).cache()
    # Fencing: an entry counts only if no earlier entry carried a larger writer id.
    before = Window.orderBy(SEQ).rowsBetween(Window.unboundedPreceding, -1)
    fenced = decoded.withColumn("_max_before", F.max("writer_id").over(before)).where(
        F.col("_max_before").isNull() | (F.col("writer_id") >= F.col("_max_before")))
    events = fenced.where(F.col("kind") == EVENT_RECEIVED)
    first = Window.partitionBy("event_id").orderBy(SEQ)
    events = (events.withColumn("_n", F.row_number().over(first)).where(F.col("_n") == 1)
              .select(SEQ, TS, "event_id", "data"))
    samples = [r["data"] for r in events.orderBy(SEQ).limit(schema_sample_entries).collect()]
    schema = _data_schema(samples)
    out = pa.schema([pa.field(SEQ, pa.int64()), pa.field(TS, pa.int64()),
                     pa.field("event_id", pa.string()), *schema])
    fn = functools.partial(_flatten, schema=schema)
    return events.mapInArrow(fn, from_arrow_schema(out))
