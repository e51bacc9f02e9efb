"""Remembered steps: a node's result for the values its criteria read, per compiled version.

A step is a pure function of the values its node's criteria read (with their types): the
converted CEL values, hence every criterion's value or error, hence the result. So a node whose
criteria read only flat fields (``event.country``, ``metrics.x``, ``apps.n.outcome``) may
return the result it gave before for the same values, without building an activation or running
CEL. Values are keyed with their types (``1``, ``1.0`` and ``True`` are distinct); only plain
scalars are keyed, and never a float zero (``-0.0 == 0.0``, yet ``1.0 / x`` tells them apart)
nor a NaN (never equal to itself: it simply misses).

A node whose values rarely repeat (a continuous score, an amount) stops being remembered after
``trial_lookups`` lookups with fewer than ``hit_ratio_min`` hits, and a node remembers at most
``entries_max`` results: neither changes any result, only which ones are computed. The memo
belongs to one :class:`~workflows.compiled.CompiledWorkflow`; publishing compiles a new one, so
a new version starts empty. Lookups and inserts are single dict operations (safe under the GIL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflows.activation import ReadPlan, StepContext
    from workflows.results import StepResult

entries_max = 1024  # per node
trial_lookups = 2048  # lookups before a node's hit ratio is judged
hit_ratio_min = 0.25

_MISSING = object()
_KEYED = frozenset({str, int, bool, float, type(None)})


def keyable(plan: ReadPlan) -> bool:
    """True when the plan reads flat fields only (no whole record): the memo can key it."""
    return bool(plan.flat) and not plan.records and not plan.apps_read


class NodeMemo:
    """One node's remembered results; ``enabled`` falls to False for good if hits are rare."""

    __slots__ = ("flat", "results", "lookups", "hits", "enabled")

    def __init__(self, plan: ReadPlan):
        self.flat = tuple((record, app_id, field) for _, record, app_id, field in plan.flat)
        self.results: dict[tuple, StepResult] = {}
        self.lookups = 0
        self.hits = 0
        self.enabled = True

    def key(self, ctx: StepContext) -> tuple | None:
        """The values read, with their types; None when one of them cannot be keyed."""
        parts: list[Any] = []
        try:
            for record, app_id, field in self.flat:
                source = ctx.apps.get(app_id) if app_id is not None else getattr(ctx, record)
                value = _MISSING if source is None or field not in source else source[field]
                t = type(value)
                if value is not _MISSING and (t not in _KEYED or (t is float and value == 0.0)):
                    return None
                parts.append(t)
                parts.append(value)
        except Exception:  # noqa: BLE001 - odd context data: computed (and traced) by the step
            return None
        return tuple(parts)

    def get(self, key: tuple) -> StepResult | None:
        self.lookups += 1
        hit = self.results.get(key)
        if hit is not None:
            self.hits += 1
        elif self.lookups >= trial_lookups and self.hits < self.lookups * hit_ratio_min:
            self.enabled = False
            self.results.clear()
        return hit

    def put(self, key: tuple, result: StepResult) -> None:
        if self.enabled and len(self.results) < entries_max:
            self.results[key] = result
