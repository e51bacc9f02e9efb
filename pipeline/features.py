"""Point-in-time metrics over history: for every event, each metric as the online engine gave it.

Values come from the engine's own code (:func:`metrics_engine.offline.compute`), never from a
re-implementation, so they are identical to ``Engine.ingest``: same plan, windows, cursors and
aggregation states. Metrics are split by (stream, GROUP BY key); for each key the events are
hash-partitioned by the key and sorted by (ts, seq) within partitions (see
:mod:`pipeline.partitioned`), then one ``compute`` runs over each partition. A metric's value
depends only on its own group's events, so this equals the online engine fed the whole log.

Callers pass events that carry ``ts`` (epoch ms) and either ``seq`` or their source order (see
:mod:`pipeline.ordering`), and metric definitions in the metric language. Events of other
streams are told apart by a ``stream`` column when there is one; otherwise every event belongs
to the definitions' stream. The result has every input column plus one column per metric.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from metrics_engine.language import MetricDef, parse
from metrics_engine.offline import compute
from pipeline.ordering import SEQ, TS, InvariantViolation, with_seq
from pipeline.partitioned import check_log_order, map_in_log_order

STREAM_COLUMN = "stream"
metrics_per_job_max = 5_000

_DOUBLE_FUNCS = {"avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "skewness", "ratio"}
_LONG_FUNCS = {"count", "count_distinct", "time_since_last"}
_FIELD_TYPED_FUNCS = {"min", "max", "oldest", "recent"}


@dataclass(frozen=True)
class FeatureGroup:
    """Metrics that share a stream and a GROUP BY key: one shuffle, one ``compute`` each."""

    stream: str
    key: tuple[str, ...]
    texts: tuple[str, ...]  # canonical text of each metric alone
    names: tuple[str, ...]
    fields: tuple[str, ...]  # event fields the metrics read (key, aggregated, predicates)


def parse_definitions(definitions: Sequence[str]) -> list[MetricDef]:
    """Every metric of ``definitions``; names must be unique."""
    defs = [d for text in definitions for d in parse(text)]
    names = [d.name for d in defs]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvariantViolation(f"metric names must be unique, repeated: {dupes}")
    if len(defs) > metrics_per_job_max:
        raise InvariantViolation(f"{len(defs)} metrics exceed metrics_per_job_max")
    return defs


def plan_groups(defs: Sequence[MetricDef]) -> list[FeatureGroup]:
    """Split metrics by (stream, key), keeping definition order inside each group."""
    by_key: dict[tuple[str, tuple[str, ...]], list[MetricDef]] = {}
    for d in defs:
        by_key.setdefault((d.stream, d.group_by), []).append(d)
    groups = []
    for (stream, key), ds in by_key.items():
        fields: list[str] = list(key)
        for d in ds:
            for f in [d.field, *_expr_fields(d.where), *_expr_fields(d.predicate)]:
                if f is not None and f not in fields:
                    fields.append(f)
        groups.append(FeatureGroup(stream, key, tuple(d.text for d in ds),
                                   tuple(d.name for d in ds), tuple(fields)))
    return groups


def _expr_fields(e) -> list[str]:
    if e is None:
        return []
    tag = e[0]
    if tag == "field":
        return [e[1]]
    if tag == "lit":
        return []
    if tag == "in":
        return _expr_fields(e[1])
    if tag in ("arith", "cmp"):
        return _expr_fields(e[2]) + _expr_fields(e[3])
    return [f for sub in e[1:] if isinstance(sub, tuple) for f in _expr_fields(sub)]


def value_type(d: MetricDef, schema: T.StructType) -> T.DataType:
    """The Spark type of a metric's values, from its function and its field's type."""
    if d.func in _LONG_FUNCS:
        return T.LongType()
    if d.func in _DOUBLE_FUNCS:
        return T.DoubleType()
    field_type = schema[d.field].dataType if d.field in schema.names else None
    if field_type is None:
        raise InvariantViolation(f"metric {d.name} reads {d.field!r}, which events lack")
    if d.func == "sum":
        integral = isinstance(field_type, T.IntegralType | T.BooleanType)
        return T.LongType() if integral else T.DoubleType()
    if d.func in _FIELD_TYPED_FUNCS:
        return T.LongType() if isinstance(field_type, T.IntegralType) else field_type
    raise InvariantViolation(f"no output type for function {d.func}")


def _compute_partition(batches: Iterator[pa.RecordBatch], texts: tuple[str, ...],
                       names: tuple[str, ...], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Run the engine's offline compute over one partition's events, batch by batch."""
    pending: list[pa.RecordBatch] = []

    def events():
        for batch in check_log_order(batches):
            pending.append(batch)
            yield from batch.to_pylist()

    columns: dict[str, list] = {n: [] for n in names}
    seqs: list[int] = []
    done = 0  # events of pending[0] already answered
    for values in compute(list(texts), events()):
        for n in names:
            columns[n].append(values.get(n))
        done += 1
        head = pending[0]
        if done == head.num_rows:
            seqs = head.column(head.schema.get_field_index(SEQ)).to_pylist()
            yield _batch(seqs, columns, schema)
            pending.pop(0)
            columns = {n: [] for n in names}
            done = 0
    if done or any(b.num_rows for b in pending):
        raise InvariantViolation("offline compute returned fewer values than events")


def _batch(seqs: list[int], columns: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    arrays = [pa.array(seqs, pa.int64())]
    for f in schema:
        if f.name != SEQ:
            arrays.append(pa.array(columns[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def compute_group(events: DataFrame, group: FeatureGroup, defs: dict[str, MetricDef],
                  partitions: int) -> DataFrame:
    """``seq`` plus this group's metric columns, for every event of the group's stream."""
    from pyspark.sql.pandas.types import to_arrow_schema

    out_schema = T.StructType([T.StructField(SEQ, T.LongType(), False)] + [
        T.StructField(n, value_type(defs[n], events.schema), True) for n in group.names])
    source = events
    if STREAM_COLUMN in events.columns:
        source = source.where(F.col(STREAM_COLUMN) == group.stream)
    cols = [TS, SEQ, *[f for f in group.fields if f not in (TS, SEQ)]]
    missing = [c for c in cols if c not in events.columns]
    if missing:
        raise InvariantViolation(f"events lack columns {missing} needed by {group.names}")
    fn = functools.partial(_compute_partition, texts=group.texts, names=group.names,
                           schema=to_arrow_schema(out_schema))
    return map_in_log_order(source.select(*cols), list(group.key), fn, out_schema.simpleString(),
                            partitions)


def point_in_time(events: DataFrame, definitions: Sequence[str],
                  partitions: int | None = None) -> DataFrame:
    """Every input column plus one column per metric, one row per event (joined on ``seq``)."""
    events = with_seq(events)
    defs = parse_definitions(definitions)
    by_name = {d.name: d for d in defs}
    clash = [n for n in by_name if n in events.columns]
    if clash:
        raise InvariantViolation(f"metric names clash with event columns: {clash}")
    if partitions is None:
        partitions = int(events.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    out = events
    for group in plan_groups(defs):
        out = out.join(compute_group(events, group, by_name, partitions), on=SEQ, how="left")
    return out.select(*events.columns, *[d.name for d in defs])
