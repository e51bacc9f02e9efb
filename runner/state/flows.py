"""The one place the runner meets ``workflows``: compile, node facts, context and the step.

Kept apart so that ``machine`` reads as the walk of ARCHITECTURE.md §1. Everything is pure.
A score node whose app is ``builtin:demo`` is scored here, inside apply, by the deterministic
demo model; every other outside work becomes an effect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import workflows
from runner.scoring import BUILTIN_DEMO, demo_score
from workflows import CompiledWorkflow, OutsideWork, StepContext, Walk, WorkflowInvalid
from workflows.activation import context as _context


class Invalid(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _model(definition: dict) -> workflows.Workflow:
    try:
        return workflows.Workflow.model_validate(definition)
    except Exception as exc:  # pydantic.ValidationError: a user error, reported by field
        raise Invalid([" ".join(str(exc).split())]) from None


def validate(definition: dict, known_metrics: list[str] | None) -> list[str]:
    try:
        wf = _model(definition)
    except Invalid as exc:
        return exc.problems
    return [str(p) for p in workflows.validate(wf, known_metrics=known_metrics)]


def compile(definition: dict, version: int, known_metrics: list[str] | None) -> CompiledWorkflow:
    wf = _model(definition)
    try:
        return workflows.compile_version(wf, version, known_metrics=known_metrics)
    except WorkflowInvalid as exc:
        raise Invalid([str(p) for p in exc.problems]) from None


def event_type(compiled: CompiledWorkflow) -> str:
    return compiled.event_type


def root(compiled: CompiledWorkflow) -> str:
    return compiled.root


def outside(compiled: CompiledWorkflow, node_id: str) -> OutsideWork | None:
    return compiled.node(node_id).outside


def decision_of(compiled: CompiledWorkflow, node_id: str) -> Any:
    return compiled.node(node_id).decision


def is_builtin_scorer(work: OutsideWork) -> bool:
    return work.kind == "score" and work.app == BUILTIN_DEMO


def builtin_result(work: OutsideWork, data: dict) -> dict[str, float]:
    """The built-in demo model's answer: every score the node declares gets the demo score."""
    value = float(demo_score(data))
    return {name: value for name in work.scores}


def metrics_used(compiled: CompiledWorkflow) -> set[str]:
    return set(compiled.workflow.metrics)


def event_data(run: dict, compiled: CompiledWorkflow | None = None) -> dict[str, Any]:
    """What criteria read as ``event``: the order's data, with its ``event_id`` unless the
    data has one (a copy only then: the run's event is never changed). Given the version
    walked, the data as it is when no criterion of it can read ``event.event_id`` (a step
    reads only the fields its criteria name): no copy per order."""
    event = run["event"]
    data = event["data"]
    if "event_id" in data or (compiled is not None and not compiled.reads_event_id):
        return data
    return {**data, "event_id": event["event_id"]}


def context(run: dict, data: dict[str, Any] | None = None,
            compiled: CompiledWorkflow | None = None) -> StepContext:
    """The step context of a run; ``data`` is ``event_data(run, compiled)`` when the caller
    has it. It holds the run's own score and app dicts (read only by the walk), so it sees
    what the caller adds to them in place."""
    return _context(event_data(run, compiled) if data is None else data, run["scores"],
                    run["metrics"], run["apps"])


WEBHOOK_SENT = workflows.WEBHOOK_SENT  # what a webhook node's output reads: not awaited


# The one walk, ``advance(compiled, ctx, node_id) -> Walk``: the backtest walks with it too. A
# node whose output says ``timed_out`` takes its default edge, whatever its criteria would
# say. The function itself, not a wrapper: two Python calls fewer per order.
advance: Callable[[CompiledWorkflow, StepContext, str], Walk] = workflows.advance
