import { describe, expect, it } from "vitest";
import { completeAt } from "./completion";

const scope = {
  event: { amount: "int", country: "string" },
  scores: { payment_abuse: "double" },
  metrics: {},
  apps: { review: { outcome: "string" } },
};

describe("completion from the edge's scope", () => {
  it("offers the records and functions at the top", () => {
    const labels = completeAt(scope, ["ev"]).map((o) => o.label);
    expect(labels).toContain("event");
    expect(labels).toContain("size");
  });
  it("offers the fields known at the edge, with their types", () => {
    expect(completeAt(scope, ["event", ""])).toEqual([{ label: "amount", detail: "int" }, { label: "country", detail: "string" }]);
    expect(completeAt(scope, ["apps", "review", "o"])).toEqual([{ label: "outcome", detail: "string" }]);
    expect(completeAt(scope, ["scores", ""]).map((o) => o.label)).toEqual(["payment_abuse"]);
  });
  it("offers nothing under what is not known there", () => {
    expect(completeAt(scope, ["apps", "score", ""])).toEqual([]);
    expect(completeAt(scope, ["event", "amount", ""])).toEqual([]);
  });
});
