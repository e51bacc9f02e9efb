// CEL completion from an edge's scope: the records a criterion may read there, and functions.
import type { Scope } from "./types";

const functions = ["size", "has", "int", "double", "string", "timestamp", "duration", "matches", "contains", "startsWith", "endsWith", "exists", "all", "in"];

/** Completion candidates at ``path`` (the dotted words before the cursor) in ``scope``. */
export function completeAt(scope: Scope, path: string[]): { label: string; detail?: string }[] {
  if (path.length <= 1) {
    return [...Object.keys(scope).map((k) => ({ label: k, detail: "record" })), ...functions.map((f) => ({ label: f, detail: "function" }))];
  }
  let here: unknown = scope;
  for (const part of path.slice(0, -1)) {
    if (here && typeof here === "object" && part in (here as object)) here = (here as Record<string, unknown>)[part];
    else return [];
  }
  if (!here || typeof here !== "object") return [];
  return Object.entries(here as Record<string, unknown>).map(([k, v]) => ({
    label: k, detail: typeof v === "string" ? v : "record",
  }));
}

