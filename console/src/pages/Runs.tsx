// The run explorer: find runs by order, card, customer, workflow, version, decision, time;
// one run's path on the graph with each criterion's value or error, metrics, scores, apps.
import { useQuery } from "@tanstack/react-query";
import { Link } from "@tanstack/react-router";
import { useMemo, useState } from "react";
import { api, must } from "../api/client";
import { Canvas } from "../editor/Canvas";
import { pathOverlay, type PathStep } from "../model/path";
import type { Workflow } from "../model/types";

const fields = ["order", "card", "customer", "workflow_id", "version", "decision"] as const;
type Filters = Partial<Record<(typeof fields)[number] | "since" | "until", string>>;

export function Runs() {
  const [draft, setDraft] = useState<Filters>({});
  const [filters, setFilters] = useState<Filters>({});
  const query = useMemo(() => {
    const q: Record<string, string | number> = {};
    for (const f of fields) if (filters[f]) q[f] = f === "version" ? Number(filters[f]) : filters[f]!;
    if (filters.since) q.since_ts = new Date(filters.since).getTime();
    if (filters.until) q.until_ts = new Date(filters.until).getTime();
    return q;
  }, [filters]);
  const runs = useQuery({
    queryKey: ["runs", query],
    queryFn: () => must(api.GET("/v1/console/runs", { params: { query } })),
  });
  return (
    <main className="page wide">
      <h1>Runs</h1>
      <form className="filters" aria-label="Find runs" onSubmit={(e) => { e.preventDefault(); setFilters(draft); }}>
        {fields.map((f) => (
          <label className="field" key={f}><span>{f.replace("_id", "")}</span>
            <input value={draft[f] ?? ""} onChange={(e) => setDraft({ ...draft, [f]: e.target.value })} size={12} /></label>
        ))}
        <label className="field"><span>started from</span><input type="datetime-local" value={draft.since ?? ""} onChange={(e) => setDraft({ ...draft, since: e.target.value })} /></label>
        <label className="field"><span>started before</span><input type="datetime-local" value={draft.until ?? ""} onChange={(e) => setDraft({ ...draft, until: e.target.value })} /></label>
        <button className="primary" type="submit">Find</button>
      </form>
      {runs.error && <p className="error" role="alert">{runs.error.message}</p>}
      <table className="list" aria-label="Runs found">
        <thead><tr><th>Run</th><th>Order</th><th>Card</th><th>Customer</th><th>Workflow</th><th>Decision</th><th>Started</th></tr></thead>
        <tbody>
          {(runs.data ?? []).map((r) => (
            <tr key={r.run_id}>
              <td><Link to="/runs/$runId" params={{ runId: r.run_id }}>{r.run_id}</Link></td>
              <td>{r.order_id}</td><td>{r.card}</td><td>{r.customer}</td>
              <td>{r.workflow_id} v{r.workflow_version}</td>
              <td>{r.decision ?? r.state}</td>
              <td>{new Date(r.started_ts).toLocaleString()}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {runs.data && runs.data.length === 0 && <p>No run matches.</p>}
    </main>
  );
}

function KV({ title, value }: { title: string; value: Record<string, unknown> }) {
  const entries = Object.entries(value ?? {});
  return (
    <section aria-label={title}>
      <h2>{title}</h2>
      {entries.length === 0 ? <p className="muted">none</p> : (
        <dl className="kv">{entries.map(([k, v]) => <><dt key={`k${k}`}>{k}</dt><dd key={`v${k}`}><code>{JSON.stringify(v)}</code></dd></>)}</dl>
      )}
    </section>
  );
}

export function RunDetail({ runId }: { runId: string }) {
  const run = useQuery({ queryKey: ["run", runId], queryFn: () => must(api.GET("/v1/console/runs/{run_id}", { params: { path: { run_id: runId } } })) });
  const wf = useQuery({
    queryKey: ["version", run.data?.workflow_id, run.data?.workflow_version], enabled: !!run.data,
    queryFn: () => must(api.GET("/v1/workflows/{workflow_id}/versions/{version}", { params: { path: { workflow_id: run.data!.workflow_id, version: run.data!.workflow_version } } })),
  });
  const list = useQuery({ queryKey: ["workflows"], queryFn: () => must(api.GET("/v1/workflows")) });
  const overlay = useMemo(() => run.data && wf.data ? { path: pathOverlay(wf.data.root, run.data.path as PathStep[]) } : undefined, [run.data, wf.data]);
  if (run.error) return <main className="page"><p className="error" role="alert">{run.error.message}</p></main>;
  if (!run.data) return <main className="page"><p>Loading…</p></main>;
  const r = run.data;
  const active = list.data?.find((w) => w.workflow_id === r.workflow_id)?.active_version;
  return (
    <main className="page wide">
      <h1>Run {r.run_id}</h1>
      <p>Event <code>{r.event_id}</code> · workflow {r.workflow_id} v{r.workflow_version} · <strong data-testid="run-outcome">{r.decision ?? `${r.state}${r.waiting_for ? ` for ${r.waiting_for}` : ""}`}</strong></p>
      {active && active !== r.workflow_version && (
        <p className="banner error" role="note">Version {r.workflow_version} that ran has since been replaced by version {active}.</p>
      )}
      <ol aria-label="Why">{r.explanation.map((line, i) => <li key={i}>{line}</li>)}</ol>
      {wf.data && <Canvas workflow={wf.data as Workflow} overlay={overlay} label={`Path of run ${r.run_id}`} />}
      <div className="split">
        <KV title="Metrics" value={r.metrics} />
        <KV title="Scores" value={r.scores} />
        <KV title="App answers" value={r.apps} />
        <KV title="Event" value={(r.event as { data?: Record<string, unknown> }).data ?? r.event} />
      </div>
    </main>
  );
}
