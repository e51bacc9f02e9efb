import { describe, expect, it } from "vitest";
import * as g from "./graph";
import type { Workflow } from "./types";

const wf = (): Workflow => ({
  id: "w", name: "w", event_type: "order", root: "event", metrics: [], event_schema: null,
  nodes: [
    { kind: "event", id: "event", name: "", edges: [
      { id: "d", to: "ok", criteria: null, default: true },
      { id: "a", to: "no", criteria: "event.amount > 5", default: false },
      { id: "b", to: "ok", criteria: "event.amount > 1", default: false },
    ] },
    { kind: "decision", id: "ok", name: "", edges: [], action: "approve", reason: "" },
    { kind: "decision", id: "no", name: "", edges: [], action: "block", reason: "" },
  ],
});

describe("graph <-> model", () => {
  it("draws one port per edge in evaluation order, default last", () => {
    const { edges } = g.toFlow(wf());
    expect(edges.map((e) => [e.id, e.sourceHandle, e.data.label])).toEqual([
      ["event/a", "out-0", "1"], ["event/b", "out-1", "2"], ["event/d", "out-2", "default"],
    ]);
  });
  it("round-trips through the React Flow graph", () => {
    const { nodes, edges } = g.toFlow(wf());
    const back = g.fromFlow(wf(), nodes, edges);
    expect(back.nodes[0].edges!.map((e) => e.id)).toEqual(["a", "b", "d"]);
    expect(back.nodes.slice(1)).toEqual(wf().nodes.slice(1));
    // a reconnected edge keeps its port and takes its new target
    const moved = edges.map((e) => (e.id === "event/b" ? { ...e, target: "no" } : e));
    expect(g.fromFlow(wf(), nodes, moved).nodes[0].edges!.find((e) => e.id === "b")!.to).toBe("no");
  });
});

describe("edge order", () => {
  it("moves a criteria edge but never past the default", () => {
    const w = g.moveEdge(wf(), "event", "a", 5);
    expect(w.nodes[0].edges!.map((e) => e.id)).toEqual(["b", "a", "d"]);
    expect(g.moveEdge(w, "event", "a", 0).nodes[0].edges!.map((e) => e.id)).toEqual(["a", "b", "d"]);
    expect(g.moveEdge(w, "event", "d", 0)).toEqual(w);
  });
  it("adds a first edge as the default and later ones before it", () => {
    let [w] = g.addNode(wf(), "score", "s");
    [w] = g.addEdge(w, "s", "ok");
    expect(w.nodes.find((n) => n.id === "s")!.edges).toEqual([{ id: "s_to_ok", to: "ok", criteria: null, default: true }]);
    [w] = g.addEdge(w, "s", "no", "scores.score > 50");
    expect(w.nodes.find((n) => n.id === "s")!.edges!.map((e) => [e.id, e.default])).toEqual([["s_to_no", false], ["s_to_ok", true]]);
  });
  it("makes another edge the default, keeping exactly one, last", () => {
    const w = g.makeDefault(wf(), "event", "a");
    const edges = w.nodes[0].edges!;
    expect(edges.map((e) => [e.id, e.default, e.criteria])).toEqual([
      ["b", false, "event.amount > 1"], ["d", false, "true"], ["a", true, null]]);
  });
  it("removing a node removes the edges into it", () => {
    const w = g.removeNode(wf(), "no");
    expect(w.nodes.map((n) => n.id)).toEqual(["event", "ok"]);
    expect(w.nodes[0].edges!.map((e) => e.id)).toEqual(["d", "b"]);
  });
  it("gives new nodes unique ids", () => {
    const [w, id] = g.addNode(wf(), "decision", "ok");
    expect(id).toBe("ok_2");
    expect(g.addNode(w, "decision", "ok")[1]).toBe("ok_3");
  });
});
