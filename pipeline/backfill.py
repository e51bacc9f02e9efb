"""Backfill: the engine state that serves a new metric correctly from the moment it is added.

The online engine fills a metric added late only from the events its reservoir still holds, so
a 392-day metric added today would be right only 392 days from now. :func:`backfill` replays
the event history (Parquet, in (ts, seq) order, sorted by Spark) through a fresh
``metrics_engine.Engine`` that holds the existing metrics *and* the new ones from the first
event on, then writes an engine snapshot. Restoring that snapshot and replaying the log after
the history's last event gives, for every metric, the values of an engine on which the new
metric was live all along (same definitions, positions and aggregation states; same digest).

The caller passes every metric the live engine serves (``existing``) plus the new ones, and the
events of the history exactly as the log held them; ``manifest`` in the result says up to which
``seq``/``ts`` the snapshot covers, so the node knows where to resume.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from metrics_engine.engine import Engine
from pipeline.features import STREAM_COLUMN, parse_definitions
from pipeline.ordering import SEQ, TS, InvariantViolation, with_seq

MANIFEST = "backfill.json"
progress_every_events = 100_000


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
    """The stream's events sorted by (ts, seq), as the online engine ingested them."""
    events = with_seq(events)
    if STREAM_COLUMN in events.columns:
        events = events.where(F.col(STREAM_COLUMN) == stream).drop(STREAM_COLUMN)
    return events.orderBy(TS, SEQ)


def backfill(events: DataFrame, new: Sequence[str], existing: Sequence[str], out_dir: str | Path,
             stream: str = "payments",
             progress: Callable[[int], None] | None = None) -> BackfillManifest:
    """Write an engine snapshot holding ``existing`` and ``new`` metrics over all ``events``."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise InvariantViolation(f"backfill output {out} is not empty")
    new_names = [d.name for d in parse_definitions(new)]
    all_defs = parse_definitions([*existing, *new])  # names unique across both
    streams = {d.stream for d in all_defs}
    if streams != {stream}:
        raise InvariantViolation(f"backfill serves one stream ({stream}), got {sorted(streams)}")
    ordered = history_in_log_order(events, stream)
    payload_cols = [c for c in ordered.columns if c != SEQ]
    count, last_seq, last_ts = 0, None, None
    with tempfile.TemporaryDirectory(prefix="railflow-backfill-") as work:
        engine = Engine(Path(work) / "engine", fsync=False)
        try:
            for text in [*existing, *new]:
                engine.define(text)
            for row in ordered.toLocalIterator(prefetchPartitions=True):
                event = {c: row[c] for c in payload_cols}
                engine.ingest(stream, event, event[TS])
                count += 1
                last_seq, last_ts = row[SEQ], event[TS]
                if progress is not None and count % progress_every_events == 0:
                    progress(count)
            engine.snapshot(out)
            digest = engine.digest()
        finally:
            engine.close()
    manifest = BackfillManifest(stream, [*existing, *new], new_names, count, last_seq, last_ts,
                                digest)
    (out / MANIFEST).write_bytes(orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2))
    return manifest
