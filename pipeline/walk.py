"""The production walk for backtests: ``workflows.advance``, the one walk apply uses, with
apply's handling of built-in scorers, and its pure steps remembered.

:class:`Walker` follows ``RunnerStateMachine._walk``: it calls ``workflows.advance`` from the
root; a built-in scorer (``builtin:demo``) where the walk stops is answered inline, as apply
does (``runner.state.flows``, a thin seam), and the walk goes on; other outside work whose
answer history lacks ends the walk (``needs_app_answer`` / ``missing_score``). Webhooks and
timed-out answers are handled inside ``advance`` itself.

A step is a pure function of the node and the values its criteria read (the node's
``ReadPlan``), so the walker hands ``advance`` a ``step_fn`` that remembers ``workflows.step``'s
results by exactly those values (type included: ``1``, ``1.0`` and ``true`` are different
keys; so is a float zero's sign, which ``-0.0 == 0.0`` hides but ``1.0 / x`` does not): a
repeated input costs a dict lookup, and every result is one ``workflows.step`` gave.
``tests/pipeline/test_backtest_runner.py`` holds the walk to the runner's decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

import workflows
from runner.state import flows
from workflows import BatchColumns, CompiledWorkflow, StepContext, StepResult
from workflows.activation import WHOLE
from workflows.errors import InvariantViolation

DECIDED = "decided"
NEEDS_APP_ANSWER = "needs_app_answer"
MISSING_SCORE = "missing_score"
PATH_SEP = ">"
steps_per_walk_max = 64  # the runner's steps_per_run_max
memo_entries_max = 200_000  # per node; past it steps are computed, not remembered

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    action: str | None
    decision_node: str | None
    path: str  # node ids from the root, PATH_SEP-joined
    waiting_node: str | None
    edges: str  # edge ids taken, PATH_SEP-joined (hits per edge)


def _typed(v: Any) -> tuple:
    """A value as a key part: its type beside it, and a float zero's sign spelled out."""
    if v.__class__ is float and v == 0.0:
        return (float, "-0.0" if math.copysign(1.0, v) < 0 else "0.0")
    return (type(v), v)


def _freeze(source: Mapping[str, Any] | None, fields) -> tuple:
    if source is None:
        return (_MISSING,)
    if fields is WHOLE:
        return tuple(sorted((k, *_typed(v)) for k, v in source.items()))
    out: list = []
    for f in fields:
        out += _typed(source.get(f, _MISSING))
    return tuple(out)


def _keyer(plan) -> Callable[[StepContext], tuple]:
    """The values (with their types) a node's criteria read from a step context."""

    def key(ctx: StepContext) -> tuple:
        parts: list = []
        for _var, record, app_id, field in plan.flat:
            src = ctx.apps.get(app_id) if app_id is not None else getattr(ctx, record)
            parts += _typed(src.get(field, _MISSING) if src is not None else _MISSING)
        for name, fields in plan.records:
            parts.append(_freeze(getattr(ctx, name), fields))
        if plan.apps_read:
            if plan.apps is None:
                parts.append(tuple(sorted((k, _freeze(v, WHOLE)) for k, v in ctx.apps.items())))
            else:
                for app_id, fields in plan.apps:
                    parts.append(_freeze(ctx.apps.get(app_id), fields))
        return tuple(parts)

    return key


class Walker:
    """Walks orders through one compiled version with the runner's rules (see module doc)."""

    def __init__(self, version: CompiledWorkflow):
        self.version = version
        self._memo: dict[str, dict[tuple, StepResult]] = {}
        self._keys: dict[str, Callable[[StepContext], tuple]] = {}
        self.steps_computed = 0
        self.steps_remembered = 0

    def _step(self, version: CompiledWorkflow, node_id: str, ctx: StepContext) -> StepResult:
        keyer = self._keys.get(node_id)
        if keyer is None:
            keyer = self._keys[node_id] = _keyer(self.version.node(node_id).plan)
            self._memo[node_id] = {}
        memo = self._memo[node_id]
        try:
            key = keyer(ctx)
            hit = memo.get(key)
        except TypeError:  # an unhashable value (a list, a map): compute, do not remember
            key, hit = None, None
        if hit is not None:
            self.steps_remembered += 1
            return hit
        result = workflows.step(version, node_id, ctx)
        self.steps_computed += 1
        if key is not None and len(memo) < memo_entries_max:
            memo[key] = result
        return result

    def walk(self, event: dict, metrics: dict, scores: dict, apps: dict) -> Outcome:
        """From the root to a decision, or to outside work whose answer history lacks.
        ``scores`` and ``apps`` are copied before the walk adds built-in answers to them."""
        v = self.version
        scores, apps = dict(scores), dict(apps)
        ctx = {"event": event, "scores": scores, "metrics": metrics, "apps": apps}
        node: str | None = None
        nodes, edges = [v.root], []
        for _ in range(steps_per_walk_max):
            w = workflows.advance(v, ctx, node, step_fn=self._step)
            for s in w.steps:
                edges.append(s.edge_id)
                nodes.append(s.next_node_id)
            for work in w.webhooks:
                apps[work.node_id] = dict(workflows.WEBHOOK_SENT)
            node = w.node_id
            if w.decision is not None:
                return Outcome(DECIDED, w.decision.action, node, PATH_SEP.join(nodes), None,
                               PATH_SEP.join(edges))
            work = w.waiting
            if work is not None and flows.is_builtin_scorer(work):
                result = flows.builtin_result(work, event)
                apps[node] = result
                scores.update(result)
                continue
            status = MISSING_SCORE if work is not None and work.kind == "score" \
                else NEEDS_APP_ANSWER
            return Outcome(status, None, None, PATH_SEP.join(nodes), node, PATH_SEP.join(edges))
        raise InvariantViolation(f"walk exceeded {steps_per_walk_max} rounds")


def _builtin_answer(work, contexts: list[dict]) -> list[dict] | None:
    """Apply's inline answer for a built-in scorer; other outside work waits."""
    if not flows.is_builtin_scorer(work):
        return None
    return [flows.builtin_result(work, ctx["event"]) for ctx in contexts]


def walk_columns(version: CompiledWorkflow, columns: BatchColumns) -> dict[str, pa.Array]:
    """:meth:`Walker.walk` for a whole batch through :func:`workflows.advance_batch`: the same
    outcome per row, as string columns named like :class:`Outcome`'s fields, plus
    ``uncompiled``: the nodes where the row was stepped one at a time because their criteria
    could not be evaluated on columns (null when none; see :func:`_uncompiled_column`)."""
    bw = workflows.advance_batch(version, columns, answer=_builtin_answer)
    node_ids = bw.node_ids
    per_node_status, per_node_action, per_node_decision, per_node_waiting = [], [], [], []
    for nid in node_ids:
        node = version.nodes[nid]
        if node.decision is not None:
            per_node_status.append(DECIDED)
            per_node_action.append(node.decision.action)
            per_node_decision.append(nid)
            per_node_waiting.append(None)
        else:
            out = node.outside
            per_node_status.append(MISSING_SCORE if out is not None and out.kind == "score"
                                   else NEEDS_APP_ANSWER)
            per_node_action.append(None)
            per_node_decision.append(None)
            per_node_waiting.append(nid)
    paths = [PATH_SEP.join(nodes) for nodes, _ in bw.paths]
    edges = [PATH_SEP.join(e) for _, e in bw.paths]
    stop = pa.array(bw.stop.astype(np.int32))
    pid = pa.array(bw.path.astype(np.int32))

    def take(values: list, index: pa.Array) -> pa.Array:
        return pa.array(values, pa.string()).take(index)

    return {"status": take(per_node_status, stop), "action": take(per_node_action, stop),
            "decision_node": take(per_node_decision, stop), "path": take(paths, pid),
            "waiting_node": take(per_node_waiting, stop), "edges": take(edges, pid),
            "uncompiled": _uncompiled_column(bw, columns.rows)}


def _uncompiled_column(bw: workflows.BatchWalk, rows: int) -> pa.Array:
    """Per row, the nodes (PATH_SEP-joined, in walk order) where it was stepped one row at a
    time because the node's criteria could not be evaluated on columns; null for none."""
    if not bw.uncompiled_rows:
        return pa.nulls(rows, pa.string())
    at: list[list[str]] = [[] for _ in range(rows)]
    for nid in bw.node_ids:  # each of these rows already cost a workflows.step
        for i in bw.uncompiled_rows.get(nid, np.zeros(0, np.int64)).tolist():
            at[i].append(nid)
    return pa.array([PATH_SEP.join(a) if a else None for a in at], pa.string())
