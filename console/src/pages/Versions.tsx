// Versions: history, the diff between two versions (or the draft) drawn on the graph, rollback.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { Link } from "@tanstack/react-router";
import { useMemo, useState } from "react";
import { api, errorText, must } from "../api/client";
import { atLeast, useMe } from "../auth";
import { Canvas } from "../editor/Canvas";
import { diffMarks, mergeForDiff } from "../model/diff";
import type { Workflow } from "../model/types";
import { DiffSummary } from "./DiffSummary";

export function Versions({ workflowId }: { workflowId: string }) {
  const me = useMe();
  const qc = useQueryClient();
  const p = { path: { workflow_id: workflowId } };
  const versions = useQuery({ queryKey: ["versions", workflowId], queryFn: () => must(api.GET("/v1/workflows/{workflow_id}/versions", { params: p })) });
  const latest = versions.data?.length ?? 0;
  const [from, setFrom] = useState<number | null>(null);
  const [to, setTo] = useState<number | null>(null);
  const a = from ?? Math.max(1, latest - 1);
  const b = to ?? latest;
  const pair = useQuery({
    queryKey: ["diff", workflowId, a, b],
    enabled: latest > 0,
    queryFn: async () => {
      const get = (v: number) => must(api.GET("/v1/workflows/{workflow_id}/versions/{version}", { params: { path: { workflow_id: workflowId, version: v } } }));
      const [before, after, diff] = await Promise.all([get(a), get(b),
        must(api.GET("/v1/workflows/{workflow_id}/diff", { params: { ...p, query: { from: a, to: b } } }))]);
      return { before: before as Workflow, after: after as Workflow, diff };
    },
  });
  const overlay = useMemo(() => pair.data ? { marks: diffMarks(pair.data.diff) } : undefined, [pair.data]);
  const merged = useMemo(() => pair.data ? mergeForDiff(pair.data.before, pair.data.after) : null, [pair.data]);
  const [msg, setMsg] = useState("");
  async function rollback(v: number) {
    const r = await api.POST("/v1/workflows/{workflow_id}/rollback", { params: p, body: { version: v } });
    if (!r.response.ok || !r.data) { setMsg(errorText(r.error)); return; }
    setMsg(`Rolled back: version ${r.data.version} has the content of version ${v}`);
    setFrom(null); setTo(null);
    qc.invalidateQueries({ queryKey: ["versions", workflowId] });
  }
  return (
    <main className="page wide">
      <h1>Versions of {workflowId} <Link to="/workflows/$workflowId" params={{ workflowId }}>Open the editor</Link></h1>
      {versions.error && <p className="error" role="alert">{versions.error.message}</p>}
      <p role="status">{msg}</p>
      <div className="split">
        <table className="list">
          <thead><tr><th>Version</th><th>Published</th><th>By</th><th><span className="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {(versions.data ?? []).slice().reverse().map((v) => (
              <tr key={v.version} className={v.version === b ? "current" : ""}>
                <td>v{v.version}{v.version === latest ? " (active)" : ""}</td>
                <td>{new Date(v.published_ts).toLocaleString()}</td>
                <td>{v.published_by ?? "—"}</td>
                <td>
                  <button onClick={() => { setFrom(Math.max(1, v.version - 1)); setTo(v.version); }}>Diff with previous</button>
                  {atLeast(me.data?.role, "manager") && v.version !== latest && <button onClick={() => void rollback(v.version)}>Roll back to v{v.version}</button>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        <div>
          <h2>Changes from v{a} to v{b}</h2>
          {pair.data && <DiffSummary diff={pair.data.diff} />}
        </div>
      </div>
      {merged && <Canvas workflow={merged} overlay={overlay} label={`Diff from v${a} to v${b}`} />}
    </main>
  );
}
