"""Feed one partition's Arrow batches to the metrics engine; get its values back as Arrow.

A :class:`Feeder` holds one memory-only plan of the online engine (the same plan, cursors and
native aggregation states as ``Engine.ingest``, see :mod:`metrics_engine.offline`) for every
metric of one stream, and answers a batch of events, sorted by (ts, seq), with one Arrow column
per metric.

The batched native call ``ingest_many(stream, ts, columns)`` of the metrics engine is used when
the installed engine has it (:data:`BATCHED`): the batch's columns go to the native core as
Arrow arrays and come back as Arrow arrays (``arrow=True``), one per metric, of a type fixed by
the metric and its field's type (the types ``features.value_type`` gives Spark), with no
Python object per event or per value. Until then the feeder
builds one small dict per event holding only the fields the metrics read and calls
``ingest``; the values are the same either way (the parity tests hold for both).

The caller feeds batches in log order of the stream's events it owns (a whole group key's
events, see :mod:`pipeline.partitioned`) and never shares a feeder between partitions.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from metrics_engine.language import MetricDef, parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir
from pipeline.ordering import TS, InvariantViolation

# True when the installed metrics engine offers the batched call (issue 11's ingest_many).
BATCHED = hasattr(Plan, "ingest_many")


def fields_read(defs: Sequence[MetricDef]) -> list[str]:
    """Event fields the metrics read: group keys, aggregated fields, WHERE/RATIO fields."""
    out: list[str] = []
    for d in defs:
        for f in [*d.group_by, d.field, *expr_fields(d.where), *expr_fields(d.predicate)]:
            if f is not None and f != TS and f not in out:
                out.append(f)
    return out


def expr_fields(e) -> list[str]:
    """Event fields a lowered WHERE/RATIO expression reads, in order of appearance."""
    if e is None:
        return []
    tag = e[0]
    if tag == "field":
        return [e[1]]
    if tag == "lit":
        return []
    if tag == "in":
        return expr_fields(e[1])
    if tag in ("arith", "cmp"):
        return expr_fields(e[2]) + expr_fields(e[3])
    return [f for sub in e[1:] if isinstance(sub, tuple) for f in expr_fields(sub)]


class Feeder:
    """One partition's engine: ``feed(batch)`` returns the metrics' values for its events."""

    def __init__(self, texts: Sequence[str], batched: bool | None = None):
        defs = [d for t in texts for d in parse(t)]
        streams = {d.stream for d in defs}
        if len(streams) != 1:
            raise InvariantViolation(f"a feeder serves one stream, got {sorted(streams)}")
        self.stream = streams.pop()
        self.names = [d.name for d in defs]
        self.fields = fields_read(defs)
        self._plan = Plan(lambda _stream: StreamReservoir(None, None, None))
        for d in defs:
            self._plan.add(d)
        self.batched = BATCHED if batched is None else batched
        if self.batched and not BATCHED:
            raise InvariantViolation("the installed metrics engine has no ingest_many")
        self._last_ts: int | None = None

    def feed(self, batch: pa.RecordBatch) -> dict[str, list | pa.Array | np.ndarray]:
        """Values of every metric for each event of ``batch`` (columns ``ts`` + the fields)."""
        missing = [f for f in (TS, *self.fields) if batch.schema.get_field_index(f) < 0]
        if missing:
            raise InvariantViolation(f"events lack fields {missing} the metrics read")
        ts = batch.column(batch.schema.get_field_index(TS))
        if ts.null_count:
            raise InvariantViolation("events with a null ts")
        columns = {f: batch.column(batch.schema.get_field_index(f)) for f in self.fields}
        # The engine makes a dict per event and a value per metric, none of them in a cycle
        # (refcounting frees them): with the collector on, those allocations set off
        # collections that walk every live object, for nothing to collect (~6 % of a W2
        # worker's CPU on month slices).
        enabled = gc.isenabled()
        gc.disable()
        try:
            if self.batched:
                return self._feed_batched(ts, columns, batch.num_rows)
            return self._feed_events(ts.to_pylist(), columns)
        finally:
            if enabled:
                gc.enable()

    def _feed_batched(self, ts: pa.Array, columns: Mapping[str, pa.Array],
                      rows: int) -> dict[str, Any]:
        # Every metric comes back as an Arrow array (no Python object per value).
        out = self._plan.ingest_many(self.stream, ts, {**columns, TS: ts}, arrow=True)
        if isinstance(out, pa.RecordBatch | pa.Table):
            out = {n: out.column(n) for n in self.names}
        got = {n: out[n] for n in self.names}
        for n, col in got.items():
            if len(col) != rows:
                raise InvariantViolation(f"ingest_many returned {len(col)} values of {n} "
                                         f"for {rows} events")
        return got

    def _feed_events(self, ts: list[int], columns: Mapping[str, pa.Array]) -> dict[str, Any]:
        keys = list(columns)
        values = [c.to_pylist() for c in columns.values()]
        ingest = self._plan.ingest
        stream = self.stream
        rows: list[tuple] = []
        append = rows.append
        order: list[str] | None = None
        for t, row in zip(ts, zip(*values, strict=True) if values else ((),) * len(ts),
                          strict=True):
            event = dict(zip(keys, row, strict=True))
            event[TS] = t
            got = ingest(stream, event, t)
            if order is None:
                order = list(got)
            append(tuple(got.values()))
        if order is None:
            return {n: [] for n in self.names}
        if sorted(order) != sorted(self.names) or list(got) != order:
            raise InvariantViolation("the engine answered with other metrics than defined")
        # Transpose in C: one tuple per metric instead of a Python append per value.
        by_name = dict(zip(order, zip(*rows, strict=True), strict=True))
        return {n: by_name[n] for n in self.names}
