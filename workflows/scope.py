"""What a criterion may read at one edge: the typed records ``event``, ``scores``, ``metrics``
and ``apps``, built from what is known upstream of the edge's source node.

"Known" means produced on every path from the root (the node's dominators, itself included):
a node upstream on only some paths may not have run, so reading its output is an error whose
message says so. Caller: :mod:`workflows.validate`.
"""

from __future__ import annotations

from collections.abc import Iterable

from workflows.cel_types import DOUBLE, DYN, FIELD_TYPES, STRING, AnyType, Record, map_of
from workflows.model import OUTSIDE_KINDS, ReviewQueueNode, ScoreNode, Workflow, node_outputs

ROOT_NAMES = ("event", "scores", "metrics", "apps")


def edge_roots(
    workflow: Workflow,
    node_id: str,
    known: frozenset[str],
    upstream: set[str],
    known_metrics: Iterable[str] | None,
) -> dict[str, AnyType]:
    """Records for criteria on edges leaving ``node_id``; ``known`` are its dominators and
    ``upstream`` all its ancestors (for hints)."""
    schema = workflow.effective_event_schema()
    if schema is None:
        event: AnyType = map_of(STRING, DYN)  # no schema declared: any field, checked at runtime
    else:
        event = Record("event", {k: FIELD_TYPES[v] for k, v in schema.items()})

    metric_hints = {}
    if known_metrics is not None:
        for m in known_metrics:
            metric_hints[m] = "declare it in the workflow's metrics list first"
    metrics = Record("metrics", {m: DOUBLE for m in workflow.metrics}, metric_hints)

    score_fields: dict[str, AnyType] = {}
    score_hints: dict[str, str] = {}
    app_fields: dict[str, AnyType] = {}
    app_hints: dict[str, str] = {}
    for node in workflow.nodes:
        if node.id in known:
            where = None
        elif node.id in upstream:
            where = f"node {node.id!r} is upstream on some paths only, so it may not have run"
        else:
            where = f"node {node.id!r} is not upstream of node {node_id!r}"
        if isinstance(node, ScoreNode):
            for s in node.scores:
                if where is None:
                    score_fields[s] = DOUBLE
                else:
                    score_hints.setdefault(s, where)
        elif node.kind in OUTSIDE_KINDS:
            if where is None:
                outputs = {k: FIELD_TYPES[v] for k, v in node_outputs(node).items()}
                enums = ({"outcome": frozenset(node.outcomes)}
                         if isinstance(node, ReviewQueueNode) else {})
                app_fields[node.id] = Record(f"apps.{node.id}", outputs, enums=enums)
            else:
                app_hints[node.id] = where
    for s in score_fields:
        score_hints.pop(s, None)
    return {
        "event": event,
        "scores": Record("scores", score_fields, score_hints),
        "metrics": metrics,
        "apps": Record("apps", app_fields, app_hints),
    }
