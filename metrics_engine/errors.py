"""Errors of the metrics engine.

``MetricSyntaxError`` is raised by ``define`` for a bad definition and says where and what was
expected. ``InvariantViolation`` means a bug: it stays on in production, unlike ``assert``.
"""

from __future__ import annotations


class InvariantViolation(RuntimeError):
    """An internal invariant does not hold (a bug, never a user error)."""


class MetricSyntaxError(ValueError):
    """A metric definition that does not parse or does not make sense.

    ``line`` and ``column`` are 1-based; ``expected`` lists what the parser would have accepted
    at that point (empty for semantic errors such as an unknown function).
    """

    def __init__(self, message: str, *, line: int, column: int, expected: list[str] | None = None):
        self.line = line
        self.column = column
        self.expected = sorted(expected or [])
        detail = f" (expected one of: {', '.join(self.expected)})" if self.expected else ""
        super().__init__(f"line {line}, column {column}: {message}{detail}")


class MetricInputError(ValueError):
    """An event the metrics cannot take, e.g. a group key or aggregated value that is a JSON
    object or list. Raised by ``ingest`` before any state changes; ``field`` names the field,
    so the caller can reject the event (a 4xx)."""

    def __init__(self, message: str, field: str):
        self.field = field
        super().__init__(message)


class MetricOutputError(ValueError):
    """A value of a batch that its metric's column cannot hold exactly
    (``ingest_many(..., arrow=True)``): a SUM beyond 64 bits in an int64 column, a fraction in
    the int64 column of an integer field, a string where the field's column holds numbers (a
    field that changed type while its old values are still in a window). Nothing is rounded,
    wrapped or dropped: the error is raised instead, *after* the batch went in (its events are
    in the state; do not feed them again). ``values`` holds every metric's values of the batch
    exactly, as lists (what ``arrow=False`` returns); ``metric`` and ``row`` name the first
    value that did not fit."""

    def __init__(self, message: str, metric: str, row: int, values: dict):
        self.metric = metric
        self.row = row
        self.values = values
        super().__init__(message)
