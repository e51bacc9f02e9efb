"""The pure step: from one node, the next node, the edge taken and why.

``step(version, node_id, context)`` tries the node's edges in order and takes the first whose
criterion is true, else the default edge. Deterministic: no clock, no randomness, no I/O.

Runtime errors: a criterion that fails while evaluating (a field missing from the context, a
value of an unexpected type) counts as **false**; the trace records the error, and the walk
goes on to the next edge, so a run always ends on the default edge at worst.

Context: ``event`` (dict), ``scores`` (name -> number), ``metrics`` (name -> number), ``apps``
(node id -> dict of outputs; a review node's includes ``outcome``). Integer scores and metrics
are read as doubles, so criteria compare them with ``scores.x > 80`` or ``> 80.0`` alike.
:func:`advance` is the only walk: the runner's apply and the backtest both call it, so both
take the same edges, webhooks included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from workflows.activation import StepContext, activation
from workflows.compiled import CompiledNode, CompiledWorkflow, Decision, result_of
from workflows.direct import direct_variables
from workflows.errors import InvariantViolation, is_engine_error
from workflows.outside import OutsideWork
from workflows.results import EdgeTrial, StepResult

__all__ = ["WEBHOOK_SENT", "EdgeTrial", "StepContext", "StepFn", "StepResult", "Walk",
           "advance", "step", "step_default", "steps_per_walk_max", "timed_out"]

steps_per_walk_max = 1000  # a valid workflow has at most nodes_max nodes on any path


def step(version: CompiledWorkflow, node_id: str,
         context: StepContext | Mapping[str, Any]) -> StepResult:
    """Take one edge out of ``node_id``. Raises InvariantViolation from a decision node."""
    node = version.node(node_id)
    if node.default is None:
        raise InvariantViolation(f"no step after a decision (node {node_id!r})")
    return _step(version, node, StepContext.of(context))


def _step(version: CompiledWorkflow, node: CompiledNode, ctx: StepContext) -> StepResult:
    """The step of a node that has a default edge. When every criterion tried gives a bool,
    the result is one of the node's precomputed ones; otherwise :func:`_traced` builds it.
    A node reading flat fields only may answer from its memo (:mod:`workflows.memo`)."""
    taken = node.taken
    if not taken:
        return _traced(version, node, ctx)
    programs = node.programs
    if not programs:
        return taken[0]
    memo = version._memos.get(node.id)
    if memo is not None and memo.enabled:
        key = memo.key(ctx)
        if key is not None:
            result = memo.get(key)
            if result is None:
                result = _evaluated(version, node, ctx)
                memo.put(key, result)
            return result
    return _evaluated(version, node, ctx)


def _evaluated(version: CompiledWorkflow, node: CompiledNode, ctx: StepContext) -> StepResult:
    direct = node.direct
    if direct:  # Python where it gives CEL's value (workflows.direct), else CEL from the start
        values = direct_variables(node.plan, ctx)
        if values is not None:
            taken = node.taken
            i = 0
            for criterion in direct:
                value = criterion(values)
                if value is True:
                    return taken[i]
                if value is not False:
                    break
                i += 1
            else:
                return taken[i]
    variables, failure = activation(node.plan, ctx)
    if failure is not None:
        return _traced(version, node, ctx)
    taken = node.taken
    i = 0
    for program in node.programs:
        try:
            value = program.execute(variables)
        except BaseException as e:  # an error is traced (and counts as false) by _traced
            if not is_engine_error(e):
                raise
            return _traced(version, node, ctx)
        if value is True:
            return taken[i]
        if value is not False:
            return _traced(version, node, ctx)
        i += 1
    return taken[i]


def _traced(version: CompiledWorkflow, node: CompiledNode, ctx: StepContext) -> StepResult:
    """The step with every trial built as it goes, errors included (a criterion is pure, so
    evaluating again what :func:`_step` tried gives the same values)."""
    trial_list: list[EdgeTrial] = []
    if node.edges:
        variables, failure = activation(node.plan, ctx)
        for edge in node.edges:
            if failure is not None:
                trial_list.append(EdgeTrial(edge.id, edge.criteria.source, False, failure))
                continue
            value, error = edge.criteria.evaluate(variables)
            trial_list.append(EdgeTrial(edge.id, edge.criteria.source, value, error))
            if value:
                return _result(version, node, edge.id, edge.to, False, trial_list)
    default = node.default
    trial_list.append(EdgeTrial(default.id, None, True))
    return _result(version, node, default.id, default.to, True, trial_list)


def step_default(version: CompiledWorkflow, node_id: str) -> StepResult:
    """Take the default edge without trying criteria: for an app that timed out."""
    node = version.node(node_id)
    if node.default is None:
        raise InvariantViolation(f"no step after a decision (node {node_id!r})")
    if not node.edges and node.taken:
        return node.taken[0]  # the same trace: the default edge alone
    trial = EdgeTrial(node.default.id, None, True)
    return _result(version, node, node.default.id, node.default.to, True, [trial])


class Walk(NamedTuple):
    """Immutable; a named tuple because one is built per walk (a frozen dataclass's
    ``__init__`` costs several times more; ``advance`` skips even the tuple's ``__new__``)."""

    steps: tuple[StepResult, ...]
    node_id: str  # where the walk stopped: a decision or a node waiting for outside work
    decision: Decision | None
    waiting: OutsideWork | None
    # webhooks passed on the way, in order: the walk never waits for one (fire and forget);
    # its node reads ``apps.<node>.status_code`` as WEBHOOK_SENT unless the context has one
    webhooks: tuple[OutsideWork, ...] = ()


WEBHOOK_SENT: Mapping[str, Any] = MappingProxyType({"status_code": 0})  # not awaited
# A named tuple built without its Python ``__new__`` (every field given): a walk builds one
# or two per round
_new = tuple.__new__


def timed_out(output: Mapping[str, Any] | None) -> bool:
    """True for the output the runner records when an app or review passed its deadline."""
    return bool(output) and output.get("timed_out") is True  # type: ignore[union-attr]


StepFn = Callable[[CompiledWorkflow, str, StepContext], StepResult]


def advance(version: CompiledWorkflow, context: StepContext | Mapping[str, Any],
            from_node: str | None = None, *, step_fn: StepFn | None = None) -> Walk:
    """The one walk, used by the runner and the backtest alike: step from ``from_node`` (the
    root by default) until a decision, or a node whose outside work has no output in the
    context yet. Outside work is done when its node is in ``apps`` (a score node also when all
    its scores are in ``scores``), so the backtest can supply history up front. A webhook is
    never waited for. A node whose output says ``timed_out`` takes its default edge.

    ``step_fn`` (default :func:`step`) must return what ``step`` returns for the same node and
    context: the backtest passes ``step`` behind a memo keyed by the values the node reads."""
    ctx = StepContext.of(context)
    nodes = version._nodes
    node_id = version.root if from_node is None else from_node
    steps: list[StepResult] = []
    webhooks: list[OutsideWork] = []
    while len(steps) < steps_per_walk_max:
        node = nodes.get(node_id)
        if node is None:
            node = version.node(node_id)  # raises UnknownNode
        if node.decision is not None:
            return _new(Walk, (tuple(steps), node_id, node.decision, None, tuple(webhooks)))
        out = node.outside
        if out is not None:
            output = ctx.apps.get(node_id)
            if out.kind == "webhook" and output is None:
                webhooks.append(out)
                ctx = _new(StepContext, (ctx.event, ctx.scores, ctx.metrics,
                                         {**ctx.apps, node_id: WEBHOOK_SENT}))
            elif output and output.get("timed_out") is True:  # timed_out(output), inline
                result = step_default(version, node_id)
                steps.append(result)
                node_id = result.next_node_id
                continue
            elif not out.is_done(ctx.scores, ctx.apps):
                return _new(Walk, (tuple(steps), node_id, None, out, tuple(webhooks)))
        result = _step(version, node, ctx) if step_fn is None else step_fn(version, node_id, ctx)
        steps.append(result)
        node_id = result.next_node_id
    raise InvariantViolation(f"walk exceeded {steps_per_walk_max} steps: is the graph acyclic?")


def _result(version: CompiledWorkflow, node: CompiledNode, edge_id: str, to: str,
            default_taken: bool, trials: list[EdgeTrial]) -> StepResult:
    return result_of(node, edge_id, version.node(to), default_taken, tuple(trials))
