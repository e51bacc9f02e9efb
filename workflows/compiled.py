"""A published version compiled for stepping: criteria compiled once, per-node read plans.

:func:`compile_version` validates the workflow and raises :class:`WorkflowInvalid` with every
problem, or returns a :class:`CompiledWorkflow` that is immutable and cheap to share between
runs, threads and the backtest. The read plan of a node lists the only context fields its
criteria read, so a step converts just those into CEL values. Each node also carries its edge
plan, made here once rather than at every step: the programs to try in order, and the
:class:`StepResult` of each error-free way out (edge i taken, every edge before it false; the
default last), so a step whose criteria raise nothing allocates no trace.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from workflows.activation import ReadPlan, read_plan
from workflows.criteria import CompiledCriterion
from workflows.errors import UnknownNode, WorkflowInvalid
from workflows.memo import NodeMemo, keyable
from workflows.model import DecisionNode, Workflow
from workflows.outside import OutsideWork, outside_work_of
from workflows.results import EdgeTrial, StepResult
from workflows.validate import analyse

# Criteria evaluated in Python where that gives CEL's value (``workflows.direct``);
# RAILFLOW_DIRECT_CRITERIA=0 compiles every version without them (to measure against).
direct_enabled = os.environ.get("RAILFLOW_DIRECT_CRITERIA", "1") != "0"


@dataclass(frozen=True, slots=True)
class Decision:
    action: str
    reason: str


@dataclass(frozen=True, slots=True)
class CompiledEdge:
    id: str
    to: str
    criteria: CompiledCriterion


@dataclass(frozen=True, slots=True)
class DefaultEdge:
    id: str
    to: str


@dataclass(frozen=True, slots=True)
class CompiledNode:
    id: str
    kind: str
    edges: tuple[CompiledEdge, ...]  # the non-default edges, in order
    default: DefaultEdge | None  # None only for decisions
    decision: Decision | None
    outside: OutsideWork | None
    plan: ReadPlan
    # The edge plan (see the module doc): ``programs[i]`` is ``edges[i].criteria.program``;
    # ``taken[i]`` the result of taking edge i with every edge before it false, ``taken[-1]``
    # the default's. Empty for decisions (and nodes built without compile_version).
    programs: tuple[Any, ...] = ()
    taken: tuple[StepResult, ...] = ()
    # ``direct[i]``: edge i's criterion as a Python function (``workflows.direct``), when every
    # edge has one and the node reads flat fields only; else empty (CEL evaluates the node).
    direct: tuple[Any, ...] = ()


class CompiledWorkflow:
    """One immutable, compiled version of a workflow."""

    __slots__ = ("_workflow", "_json", "version", "digest", "nodes", "workflow_id", "root",
                 "event_type", "_nodes", "_memos", "reads_event_id")

    def __init__(self, workflow: Workflow, version: int, nodes: Mapping[str, CompiledNode]):
        self._json = workflow.model_dump_json()
        self._workflow = Workflow.model_validate_json(self._json)  # not the caller's object
        self.version = version
        self.digest = hashlib.sha256(self._json.encode()).hexdigest()
        self._nodes: dict[str, CompiledNode] = dict(nodes)  # the walk's lookups: a plain dict
        self.nodes: Mapping[str, CompiledNode] = MappingProxyType(self._nodes)
        # remembered steps (workflows.memo), this version's own: a new version starts empty
        self._memos: dict[str, NodeMemo] = {
            nid: NodeMemo(n.plan) for nid, n in self._nodes.items()
            if n.programs and keyable(n.plan)}
        # Whether a criterion may read ``event.event_id`` (the field itself, or the whole
        # event): the runner adds the event's id to its data only then (a copy per order)
        self.reads_event_id = any(
            any(name == "event" and (fields is None or "event_id" in fields)
                for name, fields in n.plan.records)
            or any(record == "event" and field == "event_id"
                   for _, record, _, field in n.plan.flat)
            for n in self._nodes.values())
        self.workflow_id = workflow.id
        self.root = workflow.root
        self.event_type = workflow.event_type

    @property
    def workflow(self) -> Workflow:
        """The version's content, shared: read it, do not edit its lists. Steps never read it
        (they use the compiled nodes) and :meth:`workflow_copy` rebuilds it from the canonical
        JSON, so an edit can change neither decisions nor what the store republishes."""
        return self._workflow

    def workflow_copy(self) -> Workflow:
        """A fresh model of the version's content, from its canonical JSON."""
        return Workflow.model_validate_json(self._json)

    @property
    def json(self) -> str:
        """The canonical JSON the digest is computed over."""
        return self._json

    def node(self, node_id: str) -> CompiledNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNode(f"workflow {self.workflow_id} v{self.version} has no node "
                              f"{node_id!r}") from None

    def needs_outside_work(self, node_id: str) -> bool:
        return self.node(node_id).outside is not None

    def outside_work(self, node_id: str) -> OutsideWork | None:
        return self.node(node_id).outside

    def outside_nodes(self) -> dict[str, OutsideWork]:
        return {nid: n.outside for nid, n in self.nodes.items() if n.outside is not None}

    def __repr__(self) -> str:
        return f"CompiledWorkflow({self.workflow_id!r}, v{self.version}, {self.digest[:12]})"


def compile_version(
    workflow: Workflow, version: int, *, known_metrics: Iterable[str] | None = None
) -> CompiledWorkflow:
    """Validate and compile; raise WorkflowInvalid listing every problem."""
    analysis = analyse(workflow, known_metrics=known_metrics)
    if analysis.problems:
        raise WorkflowInvalid(analysis.problems)
    nodes = {}
    for node in workflow.nodes:
        edges: list[CompiledEdge] = []
        default = None
        for e in node.edges:
            if e.default:
                default = DefaultEdge(e.id, e.to)
            else:
                edges.append(CompiledEdge(e.id, e.to, analysis.criteria[(node.id, e.id)]))
        decision = (Decision(node.action.value, node.reason)
                    if isinstance(node, DecisionNode) else None)
        plan = read_plan([c.criteria for c in edges])
        nodes[node.id] = CompiledNode(node.id, node.kind, tuple(edges), default, decision,
                                      outside_work_of(node), plan)
    for node_id, node in nodes.items():
        nodes[node_id] = with_edge_plan(node, nodes)
    return CompiledWorkflow(workflow, version, nodes)


def with_edge_plan(node: CompiledNode, nodes: Mapping[str, CompiledNode]) -> CompiledNode:
    """``node`` with its programs and precomputed results (unchanged for a decision)."""
    if node.default is None or any(e.to not in nodes for e in node.edges) \
            or node.default.to not in nodes:
        return node
    false_before: list[EdgeTrial] = []
    taken: list[StepResult] = []
    for edge in node.edges:
        trial = EdgeTrial(edge.id, edge.criteria.source, True)
        taken.append(result_of(node, edge.id, nodes[edge.to], False, (*false_before, trial)))
        false_before.append(EdgeTrial(edge.id, edge.criteria.source, False))
    default = node.default
    taken.append(result_of(node, default.id, nodes[default.to], True,
                           (*false_before, EdgeTrial(default.id, None, True))))
    direct = tuple(e.criteria.direct for e in node.edges)
    if not direct_enabled or not all(direct) or not keyable(node.plan):
        direct = ()
    return replace(node, programs=tuple(e.criteria.program for e in node.edges),
                   taken=tuple(taken), direct=direct)


def result_of(node: CompiledNode, edge_id: str, nxt: CompiledNode, default_taken: bool,
              trace: tuple[EdgeTrial, ...]) -> StepResult:
    return StepResult(node.id, edge_id, nxt.id, nxt.kind, default_taken, trace, nxt.decision,
                      nxt.outside)
