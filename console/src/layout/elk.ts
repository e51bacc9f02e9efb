// Automatic layout with ELK (layered, left to right) in a web worker. Deterministic: fixed
// seed, model order kept, and each node's output ports fixed in edge order (default last).
import ELK from "elkjs/lib/elk-api.js";
import workerUrl from "elkjs/lib/elk-worker.min.js?url";
import { orderedEdges } from "../model/graph";
import type { Workflow } from "../model/types";

export const nodeWidth = 200;
export const nodeHeight = 64;
export const portGap = 18;

/** A node's drawn height: room for one output port per edge. */
export function nodeHeightFor(outs: number) {
  return Math.max(nodeHeight, 24 + outs * portGap);
}

let elk: InstanceType<typeof ELK> | null = null;

export function elkGraph(wf: Workflow) {
  const ids = new Set(wf.nodes.map((n) => n.id));
  return {
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": "RIGHT",
      "elk.randomSeed": "1",
      "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
      "elk.layered.spacing.nodeNodeBetweenLayers": "220",
      "elk.spacing.nodeNode": "40",
      "elk.portConstraints": "FIXED_ORDER",
    },
    children: wf.nodes.map((n) => {
      const outs = orderedEdges(n.edges ?? []);
      return {
        id: n.id,
        width: nodeWidth,
        height: nodeHeightFor(outs.length),
        layoutOptions: { "elk.portConstraints": "FIXED_ORDER" },
        ports: [
          { id: `${n.id}:in`, layoutOptions: { "elk.port.side": "WEST" } },
          ...outs.map((_, i) => ({ id: `${n.id}:out-${i}`, layoutOptions: { "elk.port.side": "EAST", "elk.port.index": String(i) } })),
        ],
      };
    }),
    edges: wf.nodes.flatMap((n) => orderedEdges(n.edges ?? []).filter((e) => ids.has(e.to)).map((e, i) => ({
      id: `${n.id}/${e.id}`, sources: [`${n.id}:out-${i}`], targets: [`${e.to}:in`],
    }))),
  };
}

export async function layout(wf: Workflow): Promise<Record<string, { x: number; y: number }>> {
  elk ??= new ELK({ workerUrl });
  const out = await elk.layout(elkGraph(wf));
  const pos: Record<string, { x: number; y: number }> = {};
  for (const c of out.children ?? []) pos[c.id] = { x: c.x ?? 0, y: c.y ?? 0 };
  return pos;
}
