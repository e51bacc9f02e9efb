"""What a step returns: the edge taken, the edges tried before it (the trace) and the next node.

Plain immutable values: :mod:`workflows.compiled` builds, once per published version, the
result of every error-free way out of each node (edge i taken, every edge before it false), and
a step returns one of those shared objects; only a step whose criteria raised builds its own.
Callers must not rely on identity; ``to_dict`` gives a fresh dict each time, ``to_json`` the
same bytes each time (both made once per result and kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable

    from workflows.compiled import Decision
    from workflows.outside import OutsideWork


_MISSING = object()


@dataclass(frozen=True, slots=True)
class EdgeTrial:
    edge_id: str
    criteria: str | None  # None for the default edge
    value: bool  # False when error is set
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StepResult:
    node_id: str  # where the step started
    edge_id: str  # the edge taken
    next_node_id: str
    node_kind: str  # kind of the next node
    default_taken: bool
    trace: tuple[EdgeTrial, ...]  # every edge tried, in order; the last one is the one taken
    decision: Decision | None  # set when the next node is a decision
    outside: OutsideWork | None  # set when the next node needs outside work
    # to_dict's first answer, kept to be copied: a precomputed result is recorded by many runs
    _plain: Any = field(default=None, compare=False, repr=False)
    _json: Any = field(default=None, compare=False, repr=False)  # to_json's, kept likewise
    _derived: Any = field(default=None, compare=False, repr=False)  # ``derived``'s, by key

    def to_dict(self) -> dict[str, Any]:
        """A fresh dict (every level copied: callers may edit it), keys in a fixed order."""
        plain = self._plain
        if plain is None:
            head = {"node_id": self.node_id, "edge_id": self.edge_id,
                    "next_node_id": self.next_node_id, "node_kind": self.node_kind,
                    "default_taken": self.default_taken, "trace": None, "decision": None}
            trace = tuple({"edge_id": t.edge_id, "criteria": t.criteria, "value": t.value,
                           "error": t.error} for t in self.trace)
            decision = None if self.decision is None else {
                "action": self.decision.action, "reason": self.decision.reason}
            plain = (head, trace, decision)
            object.__setattr__(self, "_plain", plain)  # a cache, not a field's value
        head, trace, decision = plain
        out = head.copy()
        out["trace"] = [t.copy() for t in trace]
        out["decision"] = None if decision is None else decision.copy()
        return out

    def derived(self, key: str, make: Callable[[StepResult], Any]) -> Any:
        """``make(self)``, made the first time ``key`` is asked and kept: whatever is made
        from a result alone stays true (it is immutable), and a precomputed result is
        presented for many runs (the runner's sentence explaining a step)."""
        kept = self._derived
        if kept is None:
            kept = {}
            object.__setattr__(self, "_derived", kept)
        value = kept.get(key, _MISSING)
        if value is _MISSING:
            value = kept[key] = make(self)
        return value

    def to_json(self) -> bytes:
        """``to_dict()`` as JSON (orjson's bytes), made once: a recorded step's JSON is this
        with the run's own fields appended, without building the dict again."""
        data = self._json
        if data is None:
            data = orjson.dumps(self.to_dict())
            object.__setattr__(self, "_json", data)
        return data
