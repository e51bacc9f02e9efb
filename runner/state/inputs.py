"""What an event may feed the metrics engine, checked before ``ingest`` changes anything.

The engine appends an event to its reservoir before it reads the group keys, so a value it
cannot take (an object or a list as a group key) would leave it half-changed. Rule: **every
field a metric of the event's stream reads** (GROUP BY fields, the aggregated field, fields
in WHERE and RATIO) **must hold a scalar**: a string, a number, a boolean or null. Other fields
of the event may hold anything JSON. ``check`` raises ``Rejected("data.<field>")`` otherwise.

``ingest`` is the one place where the engine's own input errors become rejections: the
engine's ``MetricInputError`` (naming the field) when it has one, else a TypeError or
ValueError it raises while reading the event. Those happen on every replica alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.state.rejections import Rejected

try:  # the engine names the field itself when it has this error class
    from metrics_engine.errors import MetricInputError  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the engine's version
    MetricInputError = None

_SCALARS = (str, int, float, bool, type(None))
_INPUT_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for e in (MetricInputError, TypeError, ValueError, OverflowError) if e is not None)


def fields_read(texts: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """Per stream, the event fields read by the metrics ``texts`` defines (name -> text)."""
    from metrics_engine.language import parse

    out: dict[str, set[str]] = {}
    for text in sorted(set(texts.values())):
        for d in parse(text):
            if d.name not in texts:  # dropped since, though its text defines others
                continue
            fields = out.setdefault(d.stream, set())
            fields.update(d.group_by)
            if d.field is not None:
                fields.add(d.field)
            for expr in (d.where, d.predicate):
                _expr_fields(expr, fields)
    return {stream: frozenset(f) for stream, f in out.items()}


def _expr_fields(expr: Any, into: set[str]) -> None:
    if not isinstance(expr, tuple) or not expr:
        return
    if expr[0] == "field" and len(expr) == 2 and isinstance(expr[1], str):
        into.add(expr[1])
        return
    for part in expr[1:]:
        _expr_fields(part, into)


def check(fields: frozenset[str], data: Mapping[str, Any]) -> None:
    """Raise ``Rejected`` naming the first (sorted) read field whose value is not a scalar."""
    for name in sorted(fields):
        value = data.get(name)
        if not isinstance(value, _SCALARS):
            raise Rejected(f"data.{name}", f"a metric reads this field: it must be a string, a "
                                           f"number, a boolean or null, not {_kind(value)}")


def ingest(engine: Any, stream: str, data: Mapping[str, Any], ts: int) -> dict[str, Any]:
    """The event's metric values, sorted by name; an input the engine refuses is rejected."""
    try:
        values = engine.ingest(stream, data, ts)
    except _INPUT_ERRORS as exc:
        name = getattr(exc, "field", None)
        raise Rejected(f"data.{name}" if name else "data",
                       " ".join(str(exc).split())[:300] or type(exc).__name__) from exc
    return {k: values[k] for k in sorted(values)}


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
