"""Point-in-time metrics over history: for every event, each metric as the online engine gave it.

Values come from the engine's own code (:class:`pipeline.engine_feed.Feeder`: the online
engine's plan over a memory-only reservoir), never from a re-implementation, so they are
identical to ``Engine.ingest``: same plan, windows, cursors and aggregation states. Metrics are
split by (stream, GROUP BY key); groups whose keys share columns form one partition set
(:func:`plan_partitions`), whose events are hash-partitioned by the shared columns and sorted
by (ts, seq) within partitions (see :mod:`pipeline.partitioned`), then Spark hands each
partition's Arrow batches (``mapInArrow``) to one feeder. A metric's value depends only on its
own group's events, so this equals the online engine fed the whole log.

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
from pipeline.engine_feed import Feeder, expr_fields
from pipeline.ordering import SEQ, TS, InvariantViolation, with_seq
from pipeline.partitioned import check_log_order, map_in_log_order

STREAM_COLUMN = "stream"
metrics_per_job_max = 5_000
# Events one engine takes at most. Its state grows with them while the longest window holds
# them: W2 over month keeps ~17 KB of native state per event (scenario 2 meets a new key of
# card x attribute at most events, and the 392-day windows keep every key and daily bucket;
# bench/w2_days.py, a 128th of month's cards: 1.97 GB RSS for 117 k events), besides the
# memory-only reservoir's ~0.2 KB. 150 k per partition (~2.5 GiB) fits one core's share of a
# 24 GiB machine (see pipeline.session) with room; month then runs in 100 partitions. Since
# the calendar windows of a group-by share their daily buckets the month's growth is ~0.64x
# that (docs/pipeline.md): more room, the cap is kept (more keys per engine, colder tables).
events_per_partition_max = 150_000

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
            for f in [d.field, *expr_fields(d.where), *expr_fields(d.predicate)]:
                if f is not None and f not in fields:
                    fields.append(f)
        groups.append(FeatureGroup(stream, key, tuple(d.text for d in ds),
                                   tuple(d.name for d in ds), tuple(fields)))
    return groups


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


@dataclass(frozen=True)
class PartitionSet:
    """Feature groups whose keys share columns: one shuffle by ``key``, one engine each.

    Every event of a group whose key contains ``key`` lands in one partition, so one plan per
    partition serves all of them (and shares their windows' cursors). W2's nine groupings all
    start with ``card``: the 405 features take one shuffle."""

    stream: str
    key: tuple[str, ...]
    groups: tuple[FeatureGroup, ...]

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(t for g in self.groups for t in g.texts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for g in self.groups for n in g.names)

    @property
    def fields(self) -> tuple[str, ...]:
        out: list[str] = []
        for g in self.groups:
            out += [f for f in g.fields if f not in out]
        return tuple(out)


def plan_partitions(groups: Sequence[FeatureGroup]) -> list[PartitionSet]:
    """Merge groups of one stream whose keys share columns; the set's key is the columns all
    its groups share (a group with no key stands alone in one partition)."""
    sets: list[tuple[str, tuple[str, ...], list[FeatureGroup]]] = []
    for g in groups:
        for i, (stream, key, members) in enumerate(sets):
            common = tuple(c for c in key if c in g.key)
            if stream == g.stream and common:
                sets[i] = (stream, common, [*members, g])
                break
        else:
            sets.append((g.stream, g.key, [g]))
    return [PartitionSet(stream, key, tuple(members)) for stream, key, members in sets]


def _compute_partition(batches: Iterator[pa.RecordBatch], texts: tuple[str, ...],
                       schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Feed one partition's events, in log order, to one engine; yield the columns of
    ``schema``: the metrics' values, and input columns carried through as they came."""
    feeder = Feeder(texts)
    for batch in check_log_order(batches):
        values = feeder.feed(batch)
        arrays = []
        for f in schema:
            if f.name in values:
                col = values[f.name]
                arrays.append(col.cast(f.type) if isinstance(col, pa.Array)
                              else pa.array(col, f.type))
            else:
                arrays.append(batch.column(batch.schema.get_field_index(f.name)))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def prepare_set(events: DataFrame, pset: PartitionSet, defs: dict[str, MetricDef],
                passthrough: bool = False) -> tuple[DataFrame, pa.Schema, T.StructType]:
    """(the set's events with the columns its engine reads first, the Arrow schema of
    :func:`_compute_partition`'s output, the same as a Spark schema)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    source = events
    if STREAM_COLUMN in events.columns:
        source = source.where(F.col(STREAM_COLUMN) == pset.stream)
    cols = [TS, SEQ, *[f for f in pset.fields if f not in (TS, SEQ)]]
    missing = [c for c in cols if c not in events.columns]
    if missing:
        raise InvariantViolation(f"events lack columns {missing} needed by {pset.names}")
    if passthrough:
        cols = [*cols, *[c for c in events.columns if c not in cols]]
        carried = [events.schema[c] for c in events.columns]
    else:
        carried = [T.StructField(SEQ, T.LongType(), False)]
    out_schema = T.StructType(carried + [
        T.StructField(n, value_type(defs[n], events.schema), True) for n in pset.names])
    return source.select(*cols), to_arrow_schema(out_schema), out_schema


def compute_set(events: DataFrame, pset: PartitionSet, defs: dict[str, MetricDef],
                partitions: int, passthrough: bool = False) -> DataFrame:
    """``seq`` (or, with ``passthrough``, every input column) plus the set's metric columns,
    for every event of the set's stream."""
    source, arrow_schema, out_schema = prepare_set(events, pset, defs, passthrough)
    fn = functools.partial(_compute_partition, texts=pset.texts, schema=arrow_schema)
    return map_in_log_order(source, list(pset.key), fn, out_schema.simpleString(), partitions)


def compute_group(events: DataFrame, group: FeatureGroup, defs: dict[str, MetricDef],
                  partitions: int) -> DataFrame:
    """``seq`` plus one group's metric columns (a set of one group)."""
    return compute_set(events, PartitionSet(group.stream, group.key, (group,)), defs, partitions)


def partitions_for(events: int, shuffle: int, slots: int) -> int:
    """Enough partitions that no engine holds more than ``events_per_partition_max`` events,
    at least ``shuffle``, and a multiple of the task ``slots`` (cores), so the last wave of
    tasks keeps every core busy (15 partitions on 2 cores leave one idle for a whole task)."""
    n = max(shuffle, -(-events // events_per_partition_max))
    slots = max(1, slots)
    return -(-n // slots) * slots


def default_partitions(events: DataFrame) -> int:
    """:func:`partitions_for` the events (every event of a 392-day window stays in the
    engine's memory-only reservoir), the session's shuffle partitions and its cores."""
    spark = events.sparkSession
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))
    n = events.count()  # Parquet answers from its footers
    return partitions_for(n, shuffle, spark.sparkContext.defaultParallelism)


def point_in_time(events: DataFrame, definitions: Sequence[str],
                  partitions: int | None = None) -> DataFrame:
    """Every input column plus one column per metric, one row per event.

    With one partition set and no ``stream`` column the input columns ride through the
    shuffle (no join); otherwise each set's values join the events on ``seq``."""
    events = with_seq(events)
    defs = parse_definitions(definitions)
    by_name = {d.name: d for d in defs}
    clash = [n for n in by_name if n in events.columns]
    if clash:
        raise InvariantViolation(f"metric names clash with event columns: {clash}")
    if partitions is None:
        partitions = default_partitions(events)
    sets = plan_partitions(plan_groups(defs))
    names = [d.name for d in defs]
    if len(sets) == 1 and STREAM_COLUMN not in events.columns:
        out = compute_set(events, sets[0], by_name, partitions, passthrough=True)
        return out.select(*events.columns, *names)
    out = events
    for pset in sets:
        out = out.join(compute_set(events, pset, by_name, partitions), on=SEQ, how="left")
    return out.select(*events.columns, *names)
