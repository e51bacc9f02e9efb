"""Backfill: the engine state that serves a new metric correctly from the moment it is added.

The online engine fills a metric added late only from the events its reservoir still holds, so
a 392-day metric added today would be right only 392 days from now. :func:`backfill` replays
the event history (sorted by (ts, seq) by Spark into one task on an executor, fed as Arrow
batches through ``Engine.ingest_many``) through a fresh ``metrics_engine.Engine`` that holds
the existing metrics *and* the new ones from the first event on, then writes an engine
snapshot. (One task, not one per key partition: the snapshot's reservoir and cursor
positions are global, and merging per-partition engine states needs the native core.)
Restoring that snapshot and replaying the log after the history's last event gives, for every
metric, the values of an engine on which the new metric was live all along (same definitions,
positions and aggregation states; same digest).

The caller passes every metric the live engine serves (``existing``) plus the new ones, and the
events of the history exactly as the log held them; ``manifest`` in the result says up to which
``seq``/``ts`` the snapshot covers, so the node knows where to resume.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from metrics_engine.engine import Engine
from pipeline.features import STREAM_COLUMN, parse_definitions
from pipeline.ordering import SEQ, TS, InvariantViolation, with_seq
from pipeline.partitioned import check_log_order

MANIFEST = "backfill.json"


@dataclass(frozen=True)
class BackfillManifest:
    stream: str
    definitions: list[str]
    new_metrics: list[str]
    events: int
    last_seq: int | None
    last_ts: int | None
    digest: str


def history_in_log_order(events: DataFrame, stream: str) -> DataFrame:
    """The stream's events in one partition, sorted by (ts, seq), as the online engine
    ingested them."""
    events = with_seq(events)
    if STREAM_COLUMN in events.columns:
        events = events.where(F.col(STREAM_COLUMN) == stream).drop(STREAM_COLUMN)
    return events.repartition(1).sortWithinPartitions(TS, SEQ)


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


def backfill(events: DataFrame, new: Sequence[str], existing: Sequence[str], out_dir: str | Path,
             stream: str = "payments",
             progress: Callable[[int], None] | None = None) -> BackfillManifest:
    """Write an engine snapshot holding ``existing`` and ``new`` metrics over all ``events``.

    The engine runs in one Spark task (an executor, not the driver), fed Arrow batches through
    ``Engine.ingest_many``; ``out_dir`` must be a path that task can write (local mode: this
    machine; a cluster: a directory every worker mounts)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise InvariantViolation(f"backfill output {out} is not empty")
    new_names = [d.name for d in parse_definitions(new)]
    all_defs = parse_definitions([*existing, *new])  # names unique across both
    streams = {d.stream for d in all_defs}
    if streams != {stream}:
        raise InvariantViolation(f"backfill serves one stream ({stream}), got {sorted(streams)}")
    from pyspark.sql.pandas.types import from_arrow_schema

    fn = functools.partial(_backfill_partition, texts=(*existing, *new), stream=stream,
                           out=str(out.resolve()))
    (row,) = history_in_log_order(events, stream).mapInArrow(
        fn, from_arrow_schema(_RESULT)).collect()
    if progress is not None:
        progress(row["events"])
    manifest = BackfillManifest(stream, [*existing, *new], new_names, row["events"],
                                row["last_seq"], row["last_ts"], row["digest"])
    (out / MANIFEST).write_bytes(orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2))
    return manifest
