import { describe, expect, it } from "vitest";
import { pathOverlay } from "./path";

describe("a run's path on the graph", () => {
  it("marks every edge tried, its value or error, and the default taken", () => {
    const o = pathOverlay("event", [
      { node_id: "event", edge_id: "d", next_node_id: "score", default_taken: true, trace: [
        { edge_id: "a", criteria: "metrics.n > 4", value: false },
        { edge_id: "b", criteria: "event.x == 1", value: false, error: "no such key: x" },
        { edge_id: "d", criteria: null, value: true },
      ] },
      { node_id: "score", edge_id: "hi", next_node_id: "block", default_taken: false, trace: [
        { edge_id: "hi", criteria: "scores.s > 80.0", value: true },
      ] },
    ]);
    expect([...o.nodes]).toEqual(["event", "score", "block"]);
    expect(o.edges.get("event/a")).toEqual({ value: false, error: null, taken: false, defaultTaken: false });
    expect(o.edges.get("event/b")!.error).toBe("no such key: x");
    expect(o.edges.get("event/d")).toEqual({ value: null, error: null, taken: true, defaultTaken: true });
    expect(o.edges.get("score/hi")).toEqual({ value: true, error: null, taken: true, defaultTaken: false });
  });
});
