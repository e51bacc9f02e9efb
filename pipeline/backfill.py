"""Backfill: the engine state that serves a new metric correctly from the moment it is added.

The online engine fills a metric added late only from the events its reservoir still holds, so
a 392-day metric added today would be right only 392 days from now. :func:`backfill` replays
the event history through the plan of a fresh engine that holds the existing metrics *and*
the new ones from the first event on, and writes that engine's snapshot. Restoring it and
replaying the log after the history's last event gives, for every metric, the values of an
engine on which the new metric was live all along (same definitions, positions and
aggregation states; same digest).

The work is spread over Spark tasks, none on the driver but the final merge of states
(see :mod:`metrics_engine.partitions` for why each step is exact):

1. *ranges*: the history is range-partitioned by (ts, seq) and sorted; each task writes its
   range to a Parquet file and reports its first and last (ts, seq) and its size, so every
   event's position in the stream is its range's offset plus its row in the file;
2. *reservoir*: one task per range writes its events as one segment of the snapshot's
   reservoir, and counts its events at or before the times the cursors' positions need;
3. *states*: per set of metrics sharing key columns (``features.plan_partitions``), the
   ranges are hash-partitioned by those columns and sorted by (ts, seq); each task feeds
   its keys' events, with their positions, to one ``PartialState`` (``Engine.ingest_many``'s
   batched path) and writes its states, renumbered to stream positions;
4. *assembly* (driver): the states are merged into the snapshot's engine, whose cursors are
   placed from the counts; its digest goes into the manifest.

:func:`backfill_in_one_task` is the former way (one task feeds one engine the whole history),
kept as the tests' oracle.

The caller passes every metric the live engine serves (``existing``) plus the new ones, and the
events of the history exactly as the log held them; ``manifest`` in the result says up to which
``seq``/``ts`` the snapshot covers, so the node knows where to resume. ``out_dir`` must be a
directory the driver and every executor reach (local mode: this machine).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from metrics_engine.engine import Engine
from metrics_engine.partitions import (
    PartialState,
    assemble,
    cursor_times,
    prepare,
    reservoir_dir,
)
from metrics_engine.plan import arrow_values, cursor_specs
from metrics_engine.reservoir import write_segment
from pipeline.features import (
    STREAM_COLUMN,
    parse_definitions,
    partitions_for,
    plan_groups,
    plan_partitions,
)
from pipeline.ordering import SEQ, TS, InvariantViolation, with_seq
from pipeline.partitioned import check_log_order, map_in_log_order

MANIFEST = "backfill.json"
WORK = ".backfill-work"  # inside out_dir while the job runs, removed at the end
POS = "_backfill_pos"  # an event's position in the stream, while the states are built


@dataclass(frozen=True)
class BackfillManifest:
    stream: str
    definitions: list[str]
    new_metrics: list[str]
    events: int
    last_seq: int | None
    last_ts: int | None
    digest: str


def stream_history(events: DataFrame, stream: str) -> DataFrame:
    """The stream's events with their ``seq``, without the ``stream`` column."""
    events = with_seq(events)
    if STREAM_COLUMN in events.columns:
        events = events.where(F.col(STREAM_COLUMN) == stream).drop(STREAM_COLUMN)
    return events


def history_in_log_order(events: DataFrame, stream: str) -> DataFrame:
    """The stream's events in one partition, sorted by (ts, seq), as the online engine
    ingested them."""
    return stream_history(events, stream).repartition(1).sortWithinPartitions(TS, SEQ)


def _check_out(out: Path, existing: Sequence[str], new: Sequence[str], stream: str) -> list[str]:
    """The new metrics' names, once ``out`` is empty and every metric is of ``stream``."""
    if out.exists() and any(out.iterdir()):
        raise InvariantViolation(f"backfill output {out} is not empty")
    new_names = [d.name for d in parse_definitions(new)]
    all_defs = parse_definitions([*existing, *new])  # names unique across both
    streams = {d.stream for d in all_defs}
    if streams != {stream}:
        raise InvariantViolation(f"backfill serves one stream ({stream}), got {sorted(streams)}")
    return new_names


def _manifest(out: Path, stream: str, texts: list[str], new_names: list[str], events: int,
              last_seq: int | None, last_ts: int | None, digest: str) -> BackfillManifest:
    manifest = BackfillManifest(stream, texts, new_names, events, last_seq, last_ts, digest)
    (out / MANIFEST).write_bytes(orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2))
    return manifest


# -- 1. ranges -------------------------------------------------------------------------------

_RANGE = pa.schema([("range", pa.int32()), ("events", pa.int64()),
                    ("first_ts", pa.int64()), ("first_seq", pa.int64()),
                    ("last_ts", pa.int64()), ("last_seq", pa.int64())])


def _range_file(root: str, part: int) -> str:
    return f"{root}/part-{part:05d}.parquet"


def _write_range(batches: Iterator[pa.RecordBatch], root: str) -> Iterator[pa.RecordBatch]:
    """On an executor: write one range of the history, in log order, to its Parquet file
    (named by partition, so a retried task replaces its own); yield its size and bounds."""
    from pyspark import TaskContext

    part = TaskContext.get().partitionId()
    tmp = f"{root}/_tmp-{part:05d}-{uuid.uuid4().hex}.parquet"
    n, first, last, writer = 0, (None, None), (None, None), None
    try:
        for batch in check_log_order(batches):
            if not batch.num_rows:
                continue
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema)
                first = (batch.column(TS)[0].as_py(), batch.column(SEQ)[0].as_py())
            writer.write_batch(batch)
            n += batch.num_rows
            last = (batch.column(TS)[-1].as_py(), batch.column(SEQ)[-1].as_py())
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        Path(tmp).replace(_range_file(root, part))
    yield pa.RecordBatch.from_pylist([{"range": part, "events": n, "first_ts": first[0],
                                       "first_seq": first[1], "last_ts": last[0],
                                       "last_seq": last[1]}], schema=_RANGE)


def _ranges(history: DataFrame, root: Path, parts: int) -> list[dict]:
    """The non-empty ranges in log order, each with ``offset``: the position of its first
    event. Raises if they overlap (the range partitioning must order them)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    root.mkdir(parents=True)
    rows = (history.repartitionByRange(parts, TS, SEQ).sortWithinPartitions(TS, SEQ)
            .mapInArrow(functools.partial(_write_range, root=str(root)),
                        from_arrow_schema(_RANGE)).collect())
    ranges = sorted((r.asDict() for r in rows if r["events"]), key=lambda r: r["range"])
    offset, last = 0, None
    for r in ranges:
        if last is not None and (r["first_ts"], r["first_seq"]) <= last:
            raise InvariantViolation(f"range {r['range']} overlaps the one before it")
        r["offset"] = offset
        offset += r["events"]
        last = (r["last_ts"], r["last_seq"])
    return ranges


# -- 2. reservoir ----------------------------------------------------------------------------

def _write_reservoir(r: dict, root: str, res_dir: str, times: bytes) -> bytes:
    """On an executor: range ``r``'s events as reservoir segment ``r['range'] + 1`` (segments
    in position order); returns, for each of ``times``, its events with ``ts <=`` it."""
    pf = pq.ParquetFile(_range_file(root, r["range"]))

    def events() -> Iterator[tuple[int, dict]]:
        # Column by column, as ``Engine.ingest_many`` reads them (a third of ``to_pylist``'s
        # cost per event), then one dict per event: the event the one-engine build stores.
        for batch in pf.iter_batches():
            batch = batch.drop_columns([SEQ])
            names = batch.schema.names
            columns = [arrow_values(c) for c in batch.columns]
            rows = (dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True))
            yield from zip(arrow_values(batch.column(TS)), rows, strict=True)

    n = write_segment(Path(res_dir), r["range"] + 1, r["offset"], events())
    if n != r["events"]:
        raise InvariantViolation(f"range {r['range']} holds {n} events, not {r['events']}")
    ts = pq.read_table(_range_file(root, r["range"]), columns=[TS]).column(TS).to_numpy()
    return np.searchsorted(ts, np.frombuffer(times, np.int64), "right").astype(np.int64).tobytes()


# -- 3. states -------------------------------------------------------------------------------

_STATE = pa.schema([("part", pa.int32()), ("events", pa.int64()), ("path", pa.string())])


def _build_states(batches: Iterator[pa.RecordBatch], texts: tuple[str, ...],
                  fields: tuple[str, ...], last_ts: int, events: int,
                  out: str) -> Iterator[pa.RecordBatch]:
    """On an executor: feed one key partition's events to a ``PartialState``; write its
    states, in stream positions, to a file of ``out``; yield (partition, events, path)."""
    from pyspark import TaskContext

    part = TaskContext.get().partitionId()
    state = PartialState(texts)
    n = 0
    for batch in check_log_order(batches):
        if not batch.num_rows:
            continue
        columns = {f: batch.column(f) for f in (TS, *fields)}
        state.ingest(columns[TS], columns, batch.column(POS))
        n += batch.num_rows
    path = f"{out}/part-{part:05d}-{uuid.uuid4().hex}.bin"
    Path(path).write_bytes(state.finish(last_ts, events))
    yield pa.RecordBatch.from_pylist([{"part": part, "events": n, "path": path}], schema=_STATE)


def _positioned(spark, root: Path, ranges: list[dict]) -> DataFrame:
    """The ranges' files read back, each event with its position (``POS``): its range's
    offset plus its row in the file."""
    offsets = F.create_map(*[x for r in ranges
                             for x in (F.lit(r["range"]), F.lit(r["offset"]).cast("long"))])
    part = F.regexp_extract(F.col("_metadata.file_path"), r"part-(\d+)\.parquet$", 1)
    df = spark.read.parquet(*[_range_file(str(root), r["range"]) for r in ranges])
    return df.withColumn(POS, offsets[part.cast("int")] + F.col("_metadata.row_index"))


def backfill(events: DataFrame, new: Sequence[str], existing: Sequence[str], out_dir: str | Path,
             stream: str = "payments", progress: Callable[[int], None] | None = None,
             partitions: int | None = None) -> BackfillManifest:
    """Write an engine snapshot holding ``existing`` and ``new`` metrics over all ``events``,
    built per key partition (``partitions`` per set of metrics sharing key columns; by
    default enough that no task holds more than ``features.events_per_partition_max``
    events, a multiple of the cores)."""
    out = Path(out_dir).resolve()
    new_names = _check_out(out, existing, new, stream)
    texts = [*existing, *new]
    defs = parse_definitions(texts)
    history = stream_history(events, stream)
    if POS in history.columns:
        raise InvariantViolation(f"events may not have a {POS!r} column")
    spark = history.sparkSession
    if partitions is None:
        partitions = partitions_for(history.count(), int(spark.conf.get(
            "spark.sql.shuffle.partitions")), spark.sparkContext.defaultParallelism)
    prepare(out, texts)
    work = out / WORK
    try:
        ranges = _ranges(history, work / "ranges", partitions)
        n = sum(r["events"] for r in ranges)
        first_ts = ranges[0]["first_ts"] if ranges else None
        last_ts = ranges[-1]["last_ts"] if ranges else None
        count_le: dict[int, int] = {}
        if ranges:
            specs = {s for d in defs for s in cursor_specs(d.window) if s is not None}
            times = cursor_times(specs, first_ts, last_ts)
            fn = functools.partial(_write_reservoir, root=str(work / "ranges"),
                                   res_dir=str(reservoir_dir(out, stream)),
                                   times=times.tobytes())
            counts = spark.sparkContext.parallelize(ranges, len(ranges)).map(fn).collect()
            total = np.sum([np.frombuffer(c, np.int64) for c in counts], axis=0)
            count_le = dict(zip(times.tolist(), total.tolist(), strict=True))
        states: list[str] = []
        if ranges:
            (work / "states").mkdir()
            df = _positioned(spark, work / "ranges", ranges)
            from pyspark.sql.pandas.types import from_arrow_schema

            for pset in plan_partitions(plan_groups(defs)):
                fields = tuple(f for f in pset.fields if f not in (TS, SEQ, POS))
                missing = [c for c in fields if c not in df.columns]
                if missing:
                    raise InvariantViolation(f"events lack columns {missing} of {pset.names}")
                fn = functools.partial(_build_states, texts=pset.texts, fields=fields,
                                       last_ts=last_ts, events=n, out=str(work / "states"))
                rows = map_in_log_order(df.select(TS, SEQ, POS, *fields), list(pset.key), fn,
                                        from_arrow_schema(_STATE),
                                        partitions if pset.key else 1).collect()
                if sum(r["events"] for r in rows) != n:
                    raise InvariantViolation(f"states of {pset.names} saw "
                                             f"{sum(r['events'] for r in rows)} of {n} events")
                states += [r["path"] for r in rows]
        digest = assemble(out, stream, (Path(p).read_bytes() for p in states), count_le,
                          first_ts, last_ts)
    except BaseException:
        # A half-built directory looks like a snapshot to ``restore``: leave it empty.
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if progress is not None:
        progress(n)
    last_seq = ranges[-1]["last_seq"] if ranges else None
    return _manifest(out, stream, texts, new_names, n, last_seq, last_ts, digest)


# -- the one-task oracle ---------------------------------------------------------------------
_RESULT = pa.schema([("events", pa.int64()), ("last_seq", pa.int64()), ("last_ts", pa.int64()),
                     ("digest", pa.string())])


def _backfill_partition(batches: Iterator[pa.RecordBatch], texts: tuple[str, ...], stream: str,
                        out: str) -> Iterator[pa.RecordBatch]:
    """On an executor: feed the history, batch by batch, to one engine; snapshot it to
    ``out``; yield one row (events, last seq, last ts, digest)."""
    count, last_seq, last_ts = 0, None, None
    with tempfile.TemporaryDirectory(prefix="railflow-backfill-") as work:
        engine = Engine(Path(work) / "engine", fsync=False)
        try:
            for text in texts:
                engine.define(text)
            for batch in check_log_order(batches):
                if not batch.num_rows:
                    continue
                names = batch.schema.names
                columns = {c: batch.column(i) for i, c in enumerate(names) if c != SEQ}
                engine.ingest_many(stream, columns[TS], columns)
                count += batch.num_rows
                last_seq = batch.column(names.index(SEQ))[-1].as_py()
                last_ts = columns[TS][-1].as_py()
            engine.snapshot(out)
            digest = engine.digest()
        finally:
            engine.close()
    yield pa.RecordBatch.from_pylist([{"events": count, "last_seq": last_seq,
                                       "last_ts": last_ts, "digest": digest}], schema=_RESULT)


def backfill_in_one_task(events: DataFrame, new: Sequence[str], existing: Sequence[str],
                         out_dir: str | Path, stream: str = "payments",
                         progress: Callable[[int], None] | None = None) -> BackfillManifest:
    """:func:`backfill` with one engine fed the whole history in one Spark task (an executor,
    not the driver), through ``Engine.ingest_many``: the oracle of the partitioned build."""
    out = Path(out_dir).resolve()
    new_names = _check_out(out, existing, new, stream)
    from pyspark.sql.pandas.types import from_arrow_schema

    fn = functools.partial(_backfill_partition, texts=(*existing, *new), stream=stream,
                           out=str(out))
    (row,) = history_in_log_order(events, stream).mapInArrow(
        fn, from_arrow_schema(_RESULT)).collect()
    if progress is not None:
        progress(row["events"])
    return _manifest(out, stream, [*existing, *new], new_names, row["events"], row["last_seq"],
                     row["last_ts"], row["digest"])
