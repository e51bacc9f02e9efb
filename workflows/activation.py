"""Activations: the CEL variables a node's criteria read, built from a step's context.

At publish, :func:`read_plan` merges what a node's criteria read into one plan; at each step,
:func:`activation` converts just those values into a ``cel.Context`` (conversion into CEL
dominates the cost of a step, so nothing else is converted). Integer scores and metrics are
read as doubles.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import cel

from workflows.errors import is_engine_error

if TYPE_CHECKING:
    from workflows.criteria import CompiledCriterion

WHOLE = None  # in a read plan: convert the whole record
FieldSpec = tuple[str, ...] | None  # the fields to convert, or WHOLE
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class StepContext(NamedTuple):
    """What a step reads: the order's ``event`` data, ``scores``, ``metrics`` and ``apps``
    (node id -> that node's output). Immutable; read only by the walk. A named tuple, not a
    frozen dataclass: apply builds one per walk, and a frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field) cost ~0.65 us; :func:`context` builds one in ~0.1."""

    event: Mapping[str, Any] = _EMPTY
    scores: Mapping[str, Any] = _EMPTY
    metrics: Mapping[str, Any] = _EMPTY
    apps: Mapping[str, Mapping[str, Any]] = _EMPTY

    @classmethod
    def of(cls, context: StepContext | Mapping[str, Any]) -> StepContext:
        if isinstance(context, StepContext):
            return context
        return cls(context.get("event") or _EMPTY, context.get("scores") or _EMPTY,
                   context.get("metrics") or _EMPTY, context.get("apps") or _EMPTY)


_tuple_new = tuple.__new__


def context(event: Mapping[str, Any], scores: Mapping[str, Any], metrics: Mapping[str, Any],
            apps: Mapping[str, Mapping[str, Any]]) -> StepContext:
    """``StepContext(event, scores, metrics, apps)`` without the named tuple's ``__new__``
    (a Python function): the walk's hot path builds them here."""
    return _tuple_new(StepContext, (event, scores, metrics, apps))


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What a node's criteria read: (record, fields) for event/scores/metrics, and for apps
    either WHOLE or (node id, fields) pairs. A record absent from the plan is not read."""

    records: tuple[tuple[str, FieldSpec], ...] = ()
    apps_read: bool = False
    apps: tuple[tuple[str, FieldSpec], ...] | None = ()
    # Flat variables: (variable name, record, app node id or None, field) for criteria
    # compiled to read fields directly.
    flat: tuple[tuple[str, str, str | None, str], ...] = ()
    # ``flat`` grouped by source, for the step's loop: (record, app node id or None, read as
    # double, ((field, variable name), ...)), so each source is looked up once.
    groups: tuple[tuple[str, str | None, bool, tuple[tuple[str, str], ...]], ...] = ()


def read_plan(criteria: list[CompiledCriterion]) -> ReadPlan:
    """Merge what a node's criteria read into one plan: flat variables for criteria compiled
    with them, record fields for the others."""
    flat = sorted({(name, p[0], p[1] if p[0] == "apps" else None, p[-1])
                   for c in criteria for name, p in c.flat})
    whole: set[tuple[str, ...]] = set()
    fields: dict[tuple[str, ...], set[str]] = {}
    for c in criteria:
        if c.flat:
            continue
        for p in c.paths:
            depth = 2 if p[0] == "apps" else 1  # apps.<node>.<field>, event.<field>
            if len(p) <= depth:
                whole.add(p)
            else:
                fields.setdefault(p[:depth], set()).add(p[depth])

    def spec(prefix: tuple[str, ...]) -> FieldSpec:
        return WHOLE if prefix in whole else tuple(sorted(fields[prefix]))

    records = tuple((name, spec((name,))) for name in ("event", "scores", "metrics")
                    if (name,) in whole or (name,) in fields)
    app_ids = sorted({p[1] for p in whole | set(fields) if p[0] == "apps" and len(p) > 1})
    apps_read = ("apps",) in whole or bool(app_ids)
    apps = None if ("apps",) in whole else tuple((a, spec(("apps", a))) for a in app_ids)
    grouped: dict[tuple[str, str | None], list[tuple[str, str]]] = {}
    for name, record, app_id, key in flat:
        grouped.setdefault((record, app_id), []).append((key, name))
    groups = tuple((record, app_id, record in ("scores", "metrics"), tuple(pairs))
                   for (record, app_id), pairs in grouped.items())
    return ReadPlan(records, apps_read, apps, tuple(flat), groups)


def flat_values(plan: ReadPlan, ctx: StepContext) -> Iterator[tuple[str, Any, bool]]:
    """The node's flat variables present in ``ctx``: (variable name, value as the record holds
    it, whether an int is read as a double). Each source is looked up once; a field absent
    from its record (or an app that did not run) gives no variable. What ``activation``
    converts and ``workflows.direct`` checks."""
    for record, app_id, as_double, pairs in plan.groups:
        source = ctx.apps.get(app_id) if app_id is not None else getattr(ctx, record)
        if source is None:
            continue
        for key, var in pairs:
            if key in source:
                yield var, source[key], as_double


def activation(plan: ReadPlan, ctx: StepContext) -> tuple[cel.Context | None, str | None]:
    """A CEL context holding only the fields the node's criteria read."""
    variables: dict[str, Any] = {}
    try:
        for var, value, as_double in flat_values(plan, ctx):
            if as_double and type(value) is int:
                value = float(value)  # a score of 85 reads as 85.0
            variables[var] = value
        for name, fields in plan.records:
            variables[name] = pick(getattr(ctx, name), fields, name != "event")
        if plan.apps_read:
            if plan.apps is None:
                variables["apps"] = {k: dict(v) for k, v in ctx.apps.items()}
            else:
                apps = {}
                for app_id, app_fields in plan.apps:
                    out = ctx.apps.get(app_id)
                    if out is not None:
                        apps[app_id] = pick(out, app_fields, False)
                variables["apps"] = apps
        return cel.Context(variables=variables), None
    except BaseException as e:  # unconvertible context data fails every criterion
        if not is_engine_error(e):
            raise
        return None, f"{type(e).__name__}: context cannot be converted to CEL: {e}"[:300]


def pick(source: Mapping[str, Any], fields: FieldSpec, as_double: bool) -> dict[str, Any]:
    if fields is WHOLE:
        picked = dict(source)
    else:
        picked = {f: source[f] for f in fields if f in source}
    if as_double:
        for k, v in picked.items():
            if type(v) is int:  # bool stays bool; a score of 85 reads as 85.0
                picked[k] = float(v)
    return picked
