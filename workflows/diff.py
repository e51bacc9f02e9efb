"""A structured diff between two workflow versions: fields, nodes, edges and criteria.

Nodes are matched by id and edges by (node id, edge id). A changed edge lists each changed
field (``to``, ``criteria``, ``default``, ``position``); criteria changes are also collected in
``criteria_added/removed/changed`` for the console's review screen.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from workflows.model import Workflow


class FieldChange(BaseModel):
    model_config = ConfigDict(frozen=True)
    field: str
    before: Any = None
    after: Any = None


class NodeChange(BaseModel):
    model_config = ConfigDict(frozen=True)
    node_id: str
    changes: list[FieldChange]


class EdgeRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    node_id: str
    edge_id: str


class EdgeChange(BaseModel):
    model_config = ConfigDict(frozen=True)
    node_id: str
    edge_id: str
    changes: list[FieldChange]


class CriteriaChange(BaseModel):
    model_config = ConfigDict(frozen=True)
    node_id: str
    edge_id: str
    before: str | None = None
    after: str | None = None


class WorkflowDiff(BaseModel):
    model_config = ConfigDict(frozen=True)
    workflow: list[FieldChange] = []
    nodes_added: list[str] = []
    nodes_removed: list[str] = []
    nodes_changed: list[NodeChange] = []
    edges_added: list[EdgeRef] = []
    edges_removed: list[EdgeRef] = []
    edges_changed: list[EdgeChange] = []
    criteria_added: list[CriteriaChange] = []
    criteria_removed: list[CriteriaChange] = []
    criteria_changed: list[CriteriaChange] = []

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f) for f in type(self).model_fields)


_WORKFLOW_FIELDS = ("name", "event_type", "root", "event_schema", "metrics")


def diff(a: Workflow, b: Workflow) -> WorkflowDiff:
    """What changed from ``a`` (older) to ``b`` (newer)."""
    out: dict[str, list] = {k: [] for k in WorkflowDiff.model_fields}
    for f in _WORKFLOW_FIELDS:
        before, after = getattr(a, f), getattr(b, f)
        if before != after:
            out["workflow"].append(FieldChange(field=f, before=before, after=after))
    na, nb = {n.id: n for n in a.nodes}, {n.id: n for n in b.nodes}
    out["nodes_added"] = [n for n in nb if n not in na]
    out["nodes_removed"] = [n for n in na if n not in nb]
    for nid in nb:
        if nid in na:
            changes = _node_fields(na[nid], nb[nid])
            if changes:
                out["nodes_changed"].append(NodeChange(node_id=nid, changes=changes))
    edges_a = {(nid, e.id): (i, e) for nid, n in na.items() for i, e in enumerate(n.edges)}
    edges_b = {(nid, e.id): (i, e) for nid, n in nb.items() for i, e in enumerate(n.edges)}
    for key, (_, e) in edges_b.items():
        if key not in edges_a:
            out["edges_added"].append(EdgeRef(node_id=key[0], edge_id=key[1]))
            if e.criteria is not None:
                out["criteria_added"].append(CriteriaChange(node_id=key[0], edge_id=key[1],
                                                            after=e.criteria))
    for key, (_, e) in edges_a.items():
        if key not in edges_b:
            out["edges_removed"].append(EdgeRef(node_id=key[0], edge_id=key[1]))
            if e.criteria is not None:
                out["criteria_removed"].append(CriteriaChange(node_id=key[0], edge_id=key[1],
                                                              before=e.criteria))
    for key, (ib, eb) in edges_b.items():
        if key not in edges_a:
            continue
        ia, ea = edges_a[key]
        changes = [FieldChange(field=f, before=getattr(ea, f), after=getattr(eb, f))
                   for f in ("to", "criteria", "default") if getattr(ea, f) != getattr(eb, f)]
        if ia != ib:
            changes.append(FieldChange(field="position", before=ia, after=ib))
        if changes:
            out["edges_changed"].append(EdgeChange(node_id=key[0], edge_id=key[1],
                                                   changes=changes))
        if ea.criteria != eb.criteria:
            kind = ("criteria_added" if ea.criteria is None else
                    "criteria_removed" if eb.criteria is None else "criteria_changed")
            out[kind].append(CriteriaChange(node_id=key[0], edge_id=key[1],
                                            before=ea.criteria, after=eb.criteria))
    return WorkflowDiff(**out)


def _node_fields(a, b) -> list[FieldChange]:
    da = a.model_dump(mode="json", exclude={"edges"})
    db = b.model_dump(mode="json", exclude={"edges"})
    keys = list(dict.fromkeys([*da, *db]))
    return [FieldChange(field=k, before=da.get(k), after=db.get(k))
            for k in keys if da.get(k) != db.get(k)]
