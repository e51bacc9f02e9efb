// Workflow model <-> React Flow graph, and the edits the editor makes to a workflow.
// Edges are evaluated in their listed order and the default edge is always tried last, so
// the model keeps every node's default edge at the end of its list.
import type { Edge, NodeKind, WfNode, Workflow } from "./types";

export type EdgeKey = string; // "<node id>/<edge id>"
export const edgeKey = (nodeId: string, edgeId: string): EdgeKey => `${nodeId}/${edgeId}`;

export interface FlowNode {
  id: string;
  type: "wf";
  position: { x: number; y: number };
  data: { node: WfNode; outs: number };
}
export interface FlowEdge {
  id: EdgeKey;
  source: string;
  target: string;
  sourceHandle: string;
  targetHandle: "in";
  data: { edge: Edge; order: number; label: string };
}

/** Default edge last; other edges keep their relative order. */
export function orderedEdges(edges: readonly Edge[]): Edge[] {
  return [...edges.filter((e) => !e.default), ...edges.filter((e) => e.default)];
}

export function edgeLabel(edge: Edge, order: number): string {
  return edge.default ? "default" : `${order + 1}`;
}

export function toFlow(wf: Workflow, positions: Record<string, { x: number; y: number }> = {}) {
  const nodes: FlowNode[] = wf.nodes.map((n) => ({
    id: n.id,
    type: "wf",
    position: positions[n.id] ?? { x: 0, y: 0 },
    data: { node: n, outs: (n.edges ?? []).length },
  }));
  const edges: FlowEdge[] = [];
  for (const n of wf.nodes) {
    orderedEdges(n.edges ?? []).forEach((e, i) => {
      edges.push({
        id: edgeKey(n.id, e.id),
        source: n.id,
        target: e.to,
        sourceHandle: `out-${i}`,
        targetHandle: "in",
        data: { edge: e, order: i, label: edgeLabel(e, i) },
      });
    });
  }
  return { nodes, edges };
}

/** The workflow a React Flow graph shows: each node's edges in port order. */
export function fromFlow(base: Workflow, nodes: FlowNode[], edges: FlowEdge[]): Workflow {
  const outs = new Map<string, FlowEdge[]>();
  for (const e of edges) {
    const list = outs.get(e.source) ?? [];
    list.push(e);
    outs.set(e.source, list);
  }
  const port = (e: FlowEdge) => Number(e.sourceHandle.replace("out-", ""));
  return {
    ...base,
    nodes: nodes.map((fn) => ({
      ...fn.data.node,
      edges: orderedEdges(
        (outs.get(fn.id) ?? []).sort((a, b) => port(a) - port(b)).map((e) => ({ ...e.data.edge, to: e.target })),
      ),
    })) as WfNode[],
  };
}

function mapNode(wf: Workflow, nodeId: string, f: (n: WfNode) => WfNode): Workflow {
  return { ...wf, nodes: wf.nodes.map((n) => (n.id === nodeId ? f(n) : n)) as WfNode[] };
}

export function uniqueId(taken: Iterable<string>, base: string): string {
  const used = new Set(taken);
  if (!used.has(base)) return base;
  for (let i = 2; ; i++) if (!used.has(`${base}_${i}`)) return `${base}_${i}`;
}

const allEdgeIds = (wf: Workflow) => wf.nodes.flatMap((n) => (n.edges ?? []).map((e) => e.id));

export function newNode(kind: NodeKind, id: string): WfNode {
  switch (kind) {
    case "event": return { kind, id, name: "", edges: [] };
    case "score": return { kind, id, name: "", edges: [], app: "builtin:demo", scores: ["score"], timeout_ms: 200 };
    case "app": return { kind, id, name: "", edges: [], app: "https://apps.example/check", timeout_ms: 500, outputs: {} };
    case "review_queue": return { kind, id, name: "", edges: [], queue: "manual_review", time_limit_ms: 86_400_000, outcomes: ["accept", "reject"] };
    case "webhook": return { kind, id, name: "", edges: [], url: "https://hooks.example/notify", secret_ref: "webhook", timeout_ms: 5000 };
    case "decision": return { kind, id, name: "", edges: [], action: "approve", reason: "" };
  }
}

export function addNode(wf: Workflow, kind: NodeKind, wanted?: string): [Workflow, string] {
  const id = uniqueId(wf.nodes.map((n) => n.id), wanted || kind);
  return [{ ...wf, nodes: [...wf.nodes, newNode(kind, id)] as WfNode[] }, id];
}

export function removeNode(wf: Workflow, nodeId: string): Workflow {
  return {
    ...wf,
    nodes: wf.nodes
      .filter((n) => n.id !== nodeId)
      .map((n) => ({ ...n, edges: (n.edges ?? []).filter((e) => e.to !== nodeId) })) as WfNode[],
  };
}

export function updateNode(wf: Workflow, nodeId: string, patch: Partial<WfNode>): Workflow {
  return mapNode(wf, nodeId, (n) => ({ ...n, ...patch }) as WfNode);
}

/** A new edge: the node's first edge is its default; later ones need criteria. */
export function addEdge(wf: Workflow, nodeId: string, to: string, criteria?: string): [Workflow, string] {
  const id = uniqueId(allEdgeIds(wf), `${nodeId}_to_${to}`);
  const next = mapNode(wf, nodeId, (n) => {
    const edges = n.edges ?? [];
    const edge: Edge = edges.length === 0 ? { id, to, criteria: null, default: true }
      : { id, to, criteria: criteria ?? null, default: false };
    return { ...n, edges: orderedEdges([...edges, edge]) } as WfNode;
  });
  return [next, id];
}

export function removeEdge(wf: Workflow, nodeId: string, edgeId: string): Workflow {
  return mapNode(wf, nodeId, (n) => ({ ...n, edges: (n.edges ?? []).filter((e) => e.id !== edgeId) }) as WfNode);
}

export function updateEdge(wf: Workflow, nodeId: string, edgeId: string, patch: Partial<Edge>): Workflow {
  return mapNode(wf, nodeId, (n) => ({
    ...n, edges: (n.edges ?? []).map((e) => (e.id === edgeId ? { ...e, ...patch } : e)),
  }) as WfNode);
}

/** Move a non-default edge to position ``index`` among the non-default edges. */
export function moveEdge(wf: Workflow, nodeId: string, edgeId: string, index: number): Workflow {
  return mapNode(wf, nodeId, (n) => {
    const edges = orderedEdges(n.edges ?? []);
    const rest = edges.filter((e) => !e.default && e.id !== edgeId);
    const moving = edges.find((e) => e.id === edgeId);
    if (!moving || moving.default) return n;
    const at = Math.max(0, Math.min(index, rest.length));
    rest.splice(at, 0, moving);
    return { ...n, edges: [...rest, ...edges.filter((e) => e.default)] } as WfNode;
  });
}

/** Make ``edgeId`` the node's default edge (criteria dropped); the old default becomes the
 *  last criteria edge with "true", so the runs it took keep taking it. */
export function makeDefault(wf: Workflow, nodeId: string, edgeId: string): Workflow {
  return mapNode(wf, nodeId, (n) => {
    const edges = n.edges ?? [];
    const chosen = edges.find((e) => e.id === edgeId);
    if (!chosen || chosen.default) return n;
    const old = edges.filter((e) => e.default).map((e) => ({ ...e, default: false, criteria: "true" }));
    const rest = edges.filter((e) => !e.default && e.id !== edgeId);
    return { ...n, edges: [...rest, ...old, { ...chosen, default: true, criteria: null }] } as WfNode;
  });
}

export function starter(id: string, eventType: string): Workflow {
  return {
    id, name: id, event_type: eventType, root: "event", metrics: [], event_schema: null,
    nodes: [
      { kind: "event", id: "event", name: "", edges: [{ id: "to_approve", to: "approve", criteria: null, default: true }] },
      { kind: "decision", id: "approve", name: "", edges: [], action: "approve", reason: "" },
    ],
  };
}
