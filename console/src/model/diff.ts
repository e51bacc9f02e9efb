// A structured diff drawn on the graph: the newer workflow plus what was removed, each node
// and edge marked added, removed, changed or moved.
import { edgeKey, orderedEdges, type EdgeKey } from "./graph";
import type { WfNode, Workflow, WorkflowDiff } from "./types";

export type Mark = "added" | "removed" | "changed" | "moved";
export interface DiffMarks { nodes: Record<string, Mark>; edges: Record<EdgeKey, Mark> }

export function diffMarks(d: WorkflowDiff): DiffMarks {
  const nodes: Record<string, Mark> = {};
  const edges: Record<EdgeKey, Mark> = {};
  for (const id of d.nodes_added ?? []) nodes[id] = "added";
  for (const id of d.nodes_removed ?? []) nodes[id] = "removed";
  for (const c of d.nodes_changed ?? []) nodes[c.node_id] = "changed";
  for (const e of d.edges_added ?? []) edges[edgeKey(e.node_id, e.edge_id)] = "added";
  for (const e of d.edges_removed ?? []) edges[edgeKey(e.node_id, e.edge_id)] = "removed";
  for (const c of d.edges_changed ?? []) {
    const onlyMoved = c.changes.every((f) => f.field === "position");
    edges[edgeKey(c.node_id, c.edge_id)] = onlyMoved ? "moved" : "changed";
  }
  return { nodes, edges };
}

/** ``after`` with the nodes and edges of ``before`` that it removed put back, to draw them. */
export function mergeForDiff(before: Workflow, after: Workflow): Workflow {
  const afterIds = new Set(after.nodes.map((n) => n.id));
  const beforeById = new Map(before.nodes.map((n) => [n.id, n]));
  const nodes = after.nodes.map((n) => {
    const old = beforeById.get(n.id);
    if (!old) return n;
    const have = new Set((n.edges ?? []).map((e) => e.id));
    const gone = (old.edges ?? []).filter((e) => !have.has(e.id));
    return { ...n, edges: orderedEdges([...(n.edges ?? []), ...gone.map((e) => ({ ...e, default: false }))]) } as WfNode;
  });
  for (const old of before.nodes) if (!afterIds.has(old.id)) nodes.push(old);
  return { ...after, nodes: nodes as WfNode[] };
}

export function criteriaChanges(d: WorkflowDiff) {
  return [
    ...(d.criteria_added ?? []).map((c) => ({ ...c, kind: "added" as const })),
    ...(d.criteria_removed ?? []).map((c) => ({ ...c, kind: "removed" as const })),
    ...(d.criteria_changed ?? []).map((c) => ({ ...c, kind: "changed" as const })),
  ];
}

export function diffIsEmpty(d: WorkflowDiff): boolean {
  return Object.values(d).every((v) => !Array.isArray(v) || v.length === 0);
}
