import { describe, expect, it } from "vitest";
import { diffMarks, mergeForDiff } from "./diff";
import { starter } from "./graph";
import type { WorkflowDiff } from "./types";

const empty: WorkflowDiff = {
  workflow: [], nodes_added: [], nodes_removed: [], nodes_changed: [], edges_added: [], edges_removed: [],
  edges_changed: [], criteria_added: [], criteria_removed: [], criteria_changed: [],
};

describe("diff on the graph", () => {
  it("marks added, removed, changed and moved", () => {
    const m = diffMarks({
      ...empty, nodes_added: ["n"], nodes_removed: ["r"], nodes_changed: [{ node_id: "c", changes: [] }],
      edges_added: [{ node_id: "event", edge_id: "x" }],
      edges_changed: [
        { node_id: "event", edge_id: "m", changes: [{ field: "position", before: 0, after: 1 }] },
        { node_id: "event", edge_id: "k", changes: [{ field: "criteria", before: "a", after: "b" }, { field: "position", before: 1, after: 0 }] },
      ],
    });
    expect(m.nodes).toEqual({ n: "added", r: "removed", c: "changed" });
    expect(m.edges).toEqual({ "event/x": "added", "event/m": "moved", "event/k": "changed" });
  });
  it("draws removed nodes and edges beside the newer version", () => {
    const before = starter("w", "order");
    before.nodes[0].edges!.unshift({ id: "gone", to: "old", criteria: "true", default: false });
    before.nodes.push({ kind: "decision", id: "old", name: "", edges: [], action: "block", reason: "" });
    const merged = mergeForDiff(before, starter("w", "order"));
    expect(merged.nodes.map((n) => n.id)).toEqual(["event", "approve", "old"]);
    expect(merged.nodes[0].edges!.map((e) => e.id)).toEqual(["gone", "to_approve"]);
  });
});
