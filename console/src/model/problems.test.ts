import { describe, expect, it } from "vitest";
import { starter } from "./graph";
import { placeProblems, problemsFrom422 } from "./problems";

describe("problem mapping", () => {
  it("places problems on edges, nodes and the workflow", () => {
    const placed = placeProblems([
      { code: "criteria_type", message: "cannot order int > string", node_id: "event", edge_id: "a", span: [0, 5] },
      { code: "unreachable_node", message: "x", node_id: "lost", edge_id: null, span: null },
      { code: "root_missing", message: "y", node_id: null, edge_id: null, span: null },
    ]);
    expect(placed.byEdge.get("event/a")![0].span).toEqual([0, 5]);
    expect([...placed.byNode.keys()]).toEqual(["lost"]);
    expect(placed.general.map((p) => p.code)).toEqual(["root_missing"]);
  });
  it("maps a 422's locations to node and edge ids", () => {
    const wf = starter("w", "order");
    const out = problemsFrom422(wf, [
      { loc: ["body", "nodes", 0, "event", "edges", 0, "id"], msg: "String should match pattern" },
      { loc: ["body", "nodes", 1, "decision", "action"], msg: "Input should be 'approve'" },
      { loc: ["body", "name"], msg: "too short" },
    ]);
    expect(out.map((p) => [p.node_id, p.edge_id, p.message])).toEqual([
      ["event", "to_approve", "id: String should match pattern"],
      ["approve", null, "action: Input should be 'approve'"],
      [null, null, "name: too short"],
    ]);
  });
});
