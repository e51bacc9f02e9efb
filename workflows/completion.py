"""What a criterion may read at each node's edges, as plain JSON for the console's completion.

Only what is known on every path to the node (its dominators) is offered, exactly as
:mod:`workflows.validate` type-checks criteria. Caller: :func:`node_scopes` with a workflow
(valid or not; a cyclic graph offers only what the root and the node itself produce).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from workflows import graph
from workflows.cel_types import AnyType, CelType, Record
from workflows.model import Workflow
from workflows.scope import edge_roots


def describe(t: AnyType) -> Any:
    """A record as {field: description}; a type as its CEL name."""
    if isinstance(t, Record):
        return {name: describe(f) for name, f in sorted(t.fields.items())}
    if isinstance(t, CelType):
        return str(t)
    return "dyn"


def node_scopes(workflow: Workflow, known_metrics: Iterable[str] | None = None
                ) -> dict[str, dict[str, Any]]:
    """node id -> {event, scores, metrics, apps} readable by criteria on the node's edges."""
    known_metrics = None if known_metrics is None else frozenset(known_metrics)
    nodes = {}
    for n in workflow.nodes:
        nodes.setdefault(n.id, n)
    succ = {nid: [(e.id, e.to) for e in n.edges] for nid, n in nodes.items()}
    reach = graph.reachable(succ, workflow.root)
    dom = graph.dominators(succ, workflow.root, reach) if not graph.cycle_edges(succ) else {}
    out: dict[str, dict[str, Any]] = {}
    for nid in nodes:
        if nodes[nid].kind == "decision":
            continue
        known = dom.get(nid, frozenset({nid, workflow.root}))
        upstream = graph.ancestors(succ, nid, set(nodes))
        roots = edge_roots(workflow, nid, known, upstream, known_metrics)
        out[nid] = {name: describe(t) for name, t in roots.items()}
    return out
