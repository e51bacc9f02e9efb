// Types of the API's models, from the generated OpenAPI client types.
import type { components } from "../api/schema";

type S = components["schemas"];
export type Workflow = S["Workflow"];
export type WfNode = Workflow["nodes"][number];
export type NodeKind = WfNode["kind"] & string;
export type Edge = S["Edge"];
export type Problem = S["ProblemPublic"];
export type WorkflowDiff = S["WorkflowDiff"];
export type Run = S["RunPublic"];
export type Step = S["StepPublic"];
export type ReviewTask = S["ReviewTaskPublic"];
export type Scope = Record<string, unknown>;
export type Role = "analyst" | "manager" | "admin";
