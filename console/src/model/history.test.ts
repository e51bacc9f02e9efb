import { describe, expect, it } from "vitest";
import * as h from "./history";

describe("undo", () => {
  it("undoes and redoes, and a new edit drops the redo stack", () => {
    let s = h.start(1);
    s = h.push(s, 2);
    s = h.push(s, 3);
    s = h.undo(s);
    expect(s.present).toBe(2);
    s = h.redo(s);
    expect(s.present).toBe(3);
    s = h.push(h.undo(s), 9);
    expect([s.past, s.present, s.future]).toEqual([[1, 2], 9, []]);
  });
  it("merges edits of one group (typing a criterion) into one step", () => {
    let s = h.start("");
    for (const v of ["e", "ev", "eve"]) s = h.push(s, v, "crit:a");
    s = h.push(s, "x", "crit:b");
    expect(h.undo(s).present).toBe("eve");
    expect(h.undo(h.undo(s)).present).toBe("");
    expect(h.undo(h.undo(h.undo(s))).present).toBe("");
  });
  it("keeps at most the limit", () => {
    let s = h.start(0);
    for (let i = 1; i <= h.historyLimit + 5; i++) s = h.push(s, i);
    expect(s.past.length).toBe(h.historyLimit);
  });
});
