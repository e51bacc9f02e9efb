"""Validation: every problem of a workflow at once, each located by node and edge id.

Rules: unique ids; the root exists and is the only ``event`` node; edges point at existing
nodes; acyclic; every node reachable from the root; terminal nodes are exactly the decisions;
every non-decision node has exactly one default edge (without criteria) and criteria on every
other edge; criteria parse and type-check against what is known upstream of their edge; an
edge after an always-true edge is unreachable; declared metrics exist (when the caller passes
``known_metrics``). Caller: :func:`validate`, or :func:`analyse` to reuse compiled criteria.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from workflows import graph
from workflows.criteria import CompiledCriterion, CriterionError, compile_criterion
from workflows.errors import Problem
from workflows.model import Node, ScoreNode, Workflow
from workflows.scope import edge_roots


@dataclass
class Analysis:
    problems: list[Problem] = field(default_factory=list)
    criteria: dict[tuple[str, str], CompiledCriterion] = field(default_factory=dict)

    def add(self, code: str, message: str, node_id: str | None = None, edge_id: str | None = None,
            span: tuple[int, int] | None = None):
        self.problems.append(Problem(code=code, message=message, node_id=node_id, edge_id=edge_id,
                                     span=span))


def validate(workflow: Workflow, *, known_metrics: Iterable[str] | None = None) -> list[Problem]:
    """Every problem of ``workflow``; an empty list means it can be published."""
    return analyse(workflow, known_metrics=known_metrics).problems


def analyse(workflow: Workflow, *, known_metrics: Iterable[str] | None = None) -> Analysis:
    known_metrics = None if known_metrics is None else frozenset(known_metrics)
    a = Analysis()
    _check_ids(workflow, a)
    nodes: dict[str, Node] = {}
    for n in workflow.nodes:
        nodes.setdefault(n.id, n)  # the first of duplicated ids wins; duplicates are reported
    succ = {nid: [(e.id, e.to) for e in n.edges] for nid, n in nodes.items()}

    _check_root(workflow, nodes, a)
    _check_edges(nodes, a)
    cyclic = graph.cycle_edges(succ)
    for node_id, edge_id in cyclic:
        target = next(e.to for e in nodes[node_id].edges if e.id == edge_id)
        a.add("cycle", f"edge to {target!r} lies on a cycle", node_id, edge_id)
    reach = graph.reachable(succ, workflow.root)
    for nid in nodes:
        if nid not in reach:
            a.add("unreachable_node", f"node {nid!r} cannot be reached from the root", nid)
    _check_metrics(workflow, known_metrics, a)
    _check_scores(workflow, a)

    dom = graph.dominators(succ, workflow.root, reach) if not cyclic else {}
    for nid, node in nodes.items():
        known = dom.get(nid, frozenset({nid, workflow.root}))
        upstream = graph.ancestors(succ, nid, set(nodes))
        roots = edge_roots(workflow, nid, known, upstream, known_metrics)
        _check_criteria(nid, node.edges, roots, a)
    return a


def _check_ids(workflow: Workflow, a: Analysis) -> None:
    node_counts = Counter(n.id for n in workflow.nodes)
    for nid, count in node_counts.items():
        if count > 1:
            a.add("duplicate_node_id", f"{count} nodes share the id {nid!r}", nid)
    edge_counts = Counter(e.id for n in workflow.nodes for e in n.edges)
    for n in workflow.nodes:
        for e in n.edges:
            if edge_counts[e.id] > 1:
                a.add("duplicate_edge_id", f"{edge_counts[e.id]} edges share the id {e.id!r}",
                      n.id, e.id)


def _check_root(workflow: Workflow, nodes: dict, a: Analysis) -> None:
    root = nodes.get(workflow.root)
    if root is None:
        a.add("root_missing", f"the root {workflow.root!r} is not a node")
    elif root.kind != "event":
        a.add("root_not_event", f"the root must be an event node, not {root.kind}", root.id)
    for nid, n in nodes.items():
        if n.kind == "event" and nid != workflow.root:
            a.add("extra_event_node", "only the root may be an event node", nid)


def _check_edges(nodes: dict, a: Analysis) -> None:
    for nid, n in nodes.items():
        for e in n.edges:
            if e.to not in nodes:
                a.add("edge_target_missing", f"edge points at missing node {e.to!r}", nid, e.id)
        if n.kind == "decision":
            if n.edges:
                a.add("decision_has_edges", "a decision is terminal and cannot have edges", nid)
            continue
        if not n.edges:
            a.add("terminal_not_decision", f"a {n.kind} node needs edges: only decisions end a run",
                  nid)
            continue
        defaults = [e for e in n.edges if e.default]
        if not defaults:
            a.add("default_edge_missing", "a node needs exactly one default edge", nid)
        for extra in defaults[1:]:
            a.add("default_edge_multiple", "a node has more than one default edge", nid, extra.id)
        for e in n.edges:
            if e.default and e.criteria is not None:
                a.add("default_edge_has_criteria", "the default edge takes no criteria", nid, e.id)
            if not e.default and e.criteria is None:
                a.add("criteria_missing", "a non-default edge needs criteria", nid, e.id)


def _check_metrics(workflow: Workflow, known_metrics: frozenset[str] | None, a: Analysis) -> None:
    for m, count in Counter(workflow.metrics).items():
        if count > 1:
            a.add("duplicate_metric", f"metric {m!r} is declared {count} times")
        if known_metrics is not None and m not in known_metrics:
            a.add("unknown_metric", f"metric {m!r} is not defined in the metrics engine")


def _check_scores(workflow: Workflow, a: Analysis) -> None:
    owner: dict[str, str] = {}
    for n in workflow.nodes:
        if isinstance(n, ScoreNode):
            for s in n.scores:
                if s in owner and owner[s] != n.id:
                    a.add("duplicate_score_name",
                          f"score {s!r} is also produced by node {owner[s]!r}", n.id)
                owner.setdefault(s, n.id)


def _check_criteria(node_id: str, edges, roots, a: Analysis) -> None:
    always_true_edge = None
    unreachable: list[str] = []
    for e in edges:
        if always_true_edge is not None:
            unreachable.append(e.id)
        if e.default or e.criteria is None:
            continue
        try:
            compiled = compile_criterion(e.criteria, roots)
        except CriterionError as err:
            a.add(err.code, err.message, node_id, e.id, err.span)
            continue
        a.criteria[(node_id, e.id)] = compiled
        if compiled.constant is True and always_true_edge is None:
            always_true_edge = e.id
        elif compiled.constant is False:
            a.add("criteria_always_false", "this criterion is always false", node_id, e.id)
    if always_true_edge is None:
        return
    # The default edge is tried last wherever it is listed, so it is unreachable too.
    for e in edges:
        if e.default and e.id not in unreachable:
            unreachable.append(e.id)
    for edge_id in unreachable:
        a.add("unreachable_edge",
              f"never tried: edge {always_true_edge!r} before it is always true", node_id, edge_id)
