"""Feeding an event to the metrics engine: the one place where its input errors become 4xx.

Rule (the engine's, ``metrics_engine.MetricInputError``): every field a metric of the event's
stream groups by or aggregates must hold a scalar (a string, a number, a boolean or null);
other fields may hold anything JSON. The engine checks before it changes anything, so a
refused event leaves it untouched, and names the field: ``ingest`` turns that into
``Rejected("data.<field>")``, on every replica alike. A TypeError or ValueError from an engine
without that check (a test double) is rejected the same way, naming ``data``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metrics_engine import MetricInputError
from runner.state.rejections import Rejected

_INPUT_ERRORS = (MetricInputError, TypeError, ValueError, OverflowError)


def ingest(engine: Any, stream: str, data: Mapping[str, Any], ts: int) -> dict[str, Any]:
    """The event's metric values, sorted by name; an input the engine refuses is rejected."""
    # The engine sorts natively when it can (metrics_engine.Engine.ingest_by_name); a test
    # double without it is sorted here.
    by_name = getattr(engine, "ingest_by_name", None)
    try:
        values = by_name(stream, data, ts) if by_name else engine.ingest(stream, data, ts)
    except _INPUT_ERRORS as exc:
        name = getattr(exc, "field", None)
        raise Rejected(f"data.{name}" if name else "data",
                       " ".join(str(exc).split())[:300] or type(exc).__name__) from exc
    return values if by_name else {k: values[k] for k in sorted(values)}
