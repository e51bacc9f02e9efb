// A run's (or a simulation's) path as marks on the graph: nodes passed, every edge tried with
// its value or error, the edge taken, and whether the default edge was taken.
import type { EdgeRunInfo } from "../editor/Canvas";
import { edgeKey, type EdgeKey } from "./graph";

export interface PathStep {
  node_id: string; edge_id: string; next_node_id: string; default_taken: boolean;
  trace: { edge_id: string; criteria?: string | null; value: boolean; error?: string | null }[];
}

export function pathOverlay(root: string, steps: readonly PathStep[]) {
  const nodes = new Set<string>([root]);
  const edges = new Map<EdgeKey, EdgeRunInfo>();
  for (const s of steps) {
    nodes.add(s.next_node_id);
    s.trace.forEach((t, i) => {
      const taken = i === s.trace.length - 1 && t.edge_id === s.edge_id;
      edges.set(edgeKey(s.node_id, t.edge_id), {
        value: t.criteria == null ? null : t.value, error: t.error ?? null, taken,
        defaultTaken: taken && s.default_taken,
      });
    });
  }
  return { nodes, edges };
}
