// Metrics: the defined metrics, which workflows read each, and defining new ones in the
// metric language (its syntax errors shown as the API reports them).
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, errorText, must } from "../api/client";
import { atLeast, useMe } from "../auth";

export function Metrics() {
  const me = useMe();
  const qc = useQueryClient();
  const metrics = useQuery({ queryKey: ["metrics"], queryFn: () => must(api.GET("/v1/metrics")) });
  const readers = useQuery({ queryKey: ["metric-readers"], queryFn: () => must(api.GET("/v1/console/metrics/readers")) });
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  const [msg, setMsg] = useState("");
  const isAdmin = atLeast(me.data?.role, "admin");
  async function drop(name: string) {
    const r = await api.DELETE("/v1/metrics/{name}", { params: { path: { name } } });
    if (!r.response.ok) { setError(errorText(r.error)); return; }
    setError(""); setMsg(`Dropped ${name}`);
    qc.invalidateQueries({ queryKey: ["metrics"] }); qc.invalidateQueries({ queryKey: ["metric-readers"] });
  }
  async function define(e: React.FormEvent) {
    e.preventDefault();
    const r = await api.POST("/v1/metrics", { body: { text } });
    if (!r.response.ok || !r.data) { setError(errorText(r.error)); setMsg(""); return; }
    setError(""); setMsg(`Defined ${r.data.names.join(", ")}`); setText("");
    qc.invalidateQueries({ queryKey: ["metrics"] }); qc.invalidateQueries({ queryKey: ["metric-readers"] });
  }
  return (
    <main className="page">
      <h1>Metrics</h1>
      <table className="list" aria-label="Metrics">
        <thead><tr><th>Name</th><th>Definition</th><th>Read by</th>{isAdmin && <th><span className="sr-only">Actions</span></th>}</tr></thead>
        <tbody>
          {(metrics.data ?? []).map((m) => (
            <tr key={m.name}><td><code>{m.name}</code></td><td><code>{m.text}</code></td><td>{(readers.data?.[m.name] ?? []).join(", ") || "no workflow"}</td>
              {isAdmin && <td><button onClick={() => void drop(m.name)} disabled={(readers.data?.[m.name] ?? []).length > 0}>Drop {m.name}</button></td>}</tr>
          ))}
        </tbody>
      </table>
      {atLeast(me.data?.role, "manager") && (
        <form onSubmit={define} aria-label="Define metrics" className="create">
          <h2>Define</h2>
          <label className="field"><span>Metric language</span>
            <textarea rows={3} cols={70} value={text} onChange={(e) => setText(e.target.value)}
              placeholder="SELECT COUNT(*) AS device_count_1h FROM payments GROUP BY device RANGE 1 HOURS" /></label>
          {error && <p className="error" role="alert">{error}</p>}
          <p role="status">{msg}</p>
          <button className="primary" type="submit" disabled={!text.trim()}>Define</button>
        </form>
      )}
    </main>
  );
}
