// Problems of a workflow, placed where they happen: on a node, on an edge, or the workflow.
import { edgeKey, type EdgeKey } from "./graph";
import type { Problem, Workflow } from "./types";

export interface PlacedProblems {
  byNode: Map<string, Problem[]>;
  byEdge: Map<EdgeKey, Problem[]>;
  general: Problem[];
}

export function placeProblems(problems: readonly Problem[]): PlacedProblems {
  const out: PlacedProblems = { byNode: new Map(), byEdge: new Map(), general: [] };
  for (const p of problems) {
    if (p.node_id && p.edge_id) {
      const k = edgeKey(p.node_id, p.edge_id);
      out.byEdge.set(k, [...(out.byEdge.get(k) ?? []), p]);
    } else if (p.node_id) {
      out.byNode.set(p.node_id, [...(out.byNode.get(p.node_id) ?? []), p]);
    } else {
      out.general.push(p);
    }
  }
  return out;
}

interface PydanticError { loc: (string | number)[]; msg: string; type?: string }

/** A 422 from the API (the workflow's shape is wrong) as problems on the nodes and edges. */
export function problemsFrom422(wf: Workflow, detail: PydanticError[]): Problem[] {
  return detail.map((d) => {
    const loc = d.loc[0] === "body" ? d.loc.slice(1) : d.loc;
    let node_id: string | null = null;
    let edge_id: string | null = null;
    if (loc[0] === "nodes" && typeof loc[1] === "number") {
      const node = wf.nodes[loc[1]];
      node_id = node?.id ?? null;
      const edgeAt = loc.indexOf("edges");
      if (node && edgeAt >= 0 && typeof loc[edgeAt + 1] === "number") {
        edge_id = (node.edges ?? [])[loc[edgeAt + 1] as number]?.id ?? null;
      }
    }
    const field = loc.filter((x) => typeof x === "string" && !["nodes", "edges"].includes(x as string)).pop();
    return { code: "shape", message: field ? `${String(field)}: ${d.msg}` : d.msg, node_id, edge_id, span: null };
  });
}
