import ELK from "elkjs/lib/elk.bundled.js";
import { describe, expect, it } from "vitest";
import { starter } from "../model/graph";
import type { Workflow } from "../model/types";
import { elkGraph } from "./elk";

function wf(): Workflow {
  const w = starter("w", "order");
  w.nodes[0].edges = [
    { id: "z_last", to: "approve", criteria: null, default: true },
    { id: "b_first", to: "block", criteria: "event.amount > 5", default: false },
    { id: "a_second", to: "hold", criteria: "event.amount > 1", default: false },
  ];
  w.nodes.push({ kind: "decision", id: "block", name: "", edges: [], action: "block", reason: "" });
  w.nodes.push({ kind: "decision", id: "hold", name: "", edges: [], action: "hold", reason: "" });
  return w;
}

describe("ELK layout", () => {
  it("puts output ports in edge order, the default last", () => {
    const g = elkGraph(wf());
    expect(g.children[0].ports.map((p) => p.id)).toEqual(["event:in", "event:out-0", "event:out-1", "event:out-2"]);
    expect(g.edges.map((e) => [e.id, e.sources[0]])).toEqual([
      ["event/b_first", "event:out-0"], ["event/a_second", "event:out-1"], ["event/z_last", "event:out-2"]]);
  });
  it("is deterministic and draws the edges in port order top to bottom", async () => {
    const elk = new ELK();
    const once = await elk.layout(elkGraph(wf()));
    const twice = await new ELK().layout(elkGraph(wf()));
    const pos = (g: typeof once) => Object.fromEntries((g.children ?? []).map((c) => [c.id, [c.x, c.y]]));
    expect(pos(twice)).toEqual(pos(once));
    const y = (id: string) => pos(once)[id][1] as number;
    expect(y("block")).toBeLessThan(y("hold"));
    expect(y("hold")).toBeLessThan(y("approve"));
  });
});
