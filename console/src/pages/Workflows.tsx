// The workflows list; managers create new ones from a starter (event → approve).
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { Link, useNavigate } from "@tanstack/react-router";
import { useState } from "react";
import { api, errorText, must } from "../api/client";
import { atLeast, useMe } from "../auth";
import { starter } from "../model/graph";

export function Workflows() {
  const me = useMe();
  const list = useQuery({ queryKey: ["workflows"], queryFn: () => must(api.GET("/v1/workflows")) });
  const [id, setId] = useState("");
  const [eventType, setEventType] = useState("order");
  const [error, setError] = useState("");
  const nav = useNavigate();
  const qc = useQueryClient();
  async function create(e: React.FormEvent) {
    e.preventDefault();
    const r = await api.POST("/v1/workflows", { body: starter(id, eventType) });
    if (!r.response.ok) { setError(errorText(r.error)); return; }
    qc.invalidateQueries({ queryKey: ["workflows"] });
    nav({ to: "/workflows/$workflowId", params: { workflowId: id } });
  }
  return (
    <main className="page">
      <h1>Workflows</h1>
      {list.error && <p className="error" role="alert">{String(list.error.message)}</p>}
      <table className="list">
        <thead><tr><th>Workflow</th><th>Event</th><th>Active version</th><th>Draft</th></tr></thead>
        <tbody>
          {(list.data ?? []).map((w) => (
            <tr key={w.workflow_id}>
              <td><Link to="/workflows/$workflowId" params={{ workflowId: w.workflow_id }}>{w.workflow_id}</Link></td>
              <td>{w.event_type ?? "—"}</td>
              <td>{w.active_version ?? "never published"}</td>
              <td>{w.has_draft ? "yes" : "no"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {atLeast(me.data?.role, "manager") && (
        <form className="create" onSubmit={create} aria-label="New workflow">
          <h2>New workflow</h2>
          <label className="field"><span>Id</span><input value={id} onChange={(e) => setId(e.target.value)} required pattern="[A-Za-z_][A-Za-z0-9_]*" /></label>
          <label className="field"><span>Event type</span><input value={eventType} onChange={(e) => setEventType(e.target.value)} required /></label>
          {error && <p className="error" role="alert">{error}</p>}
          <button className="primary" type="submit">Create</button>
        </form>
      )}
    </main>
  );
}
