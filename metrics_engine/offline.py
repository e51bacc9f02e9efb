"""Offline computation with the online engine's own classes (for the Spark pipeline).

``compute(definition_text, events_sorted)`` runs the same plan, windows, cursors and
aggregation states as ``Engine.ingest`` over a memory-only reservoir and state store, and yields
one dict of metric values per event. Feed the events of one group (or of the whole stream)
sorted by (ts, log position): since a metric's value for an event depends only on the events of
its own group in its window, per-group runs give the values the online engine gives.

>>> rows = [{"ts": 0, "card": "a", "amount": 5}, {"ts": 1000, "card": "a", "amount": 7}]
>>> list(compute("SELECT SUM(amount) AS s FROM p GROUP BY card RANGE 1 SECONDS", rows))
[{'s': 5}, {'s': 7}]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir


def compute(definition_text: str | list[str], events_sorted: Iterable[Mapping[str, Any]], *,
            ts_field: str = "ts") -> Iterator[dict[str, Any]]:
    """Yield, for each event, the values of the metrics of ``definition_text``.

    ``definition_text`` is one definition or a list of them, all on the same stream; each
    event's time is ``event[ts_field]`` in epoch milliseconds."""
    texts = [definition_text] if isinstance(definition_text, str) else list(definition_text)
    defs = [d for t in texts for d in parse(t)]
    streams = {d.stream for d in defs}
    if len(streams) != 1:
        raise ValueError(f"offline.compute takes metrics of one stream, got {sorted(streams)}")
    plan = Plan(lambda stream: StreamReservoir(None, None, None))
    for d in defs:
        plan.add(d)
    stream = streams.pop()
    ingest = plan.ingest
    for ev in events_sorted:
        yield ingest(stream, ev, int(ev[ts_field]))
