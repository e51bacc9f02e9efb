// Try the draft before it goes live: simulate one event (or a past run's inputs) and light up
// its path, or backtest it against the active version over the most recent runs.
import { useState } from "react";
import { api, errorText } from "../api/client";
import type { PathStep } from "../model/path";
import type { Workflow } from "../model/types";

const sample = JSON.stringify({ event_id: "try-1", type: "order", data: {
  card: "card-1", customer: "cust-1", merchant: "m-1", country: "US", channel: "card-not-present", amount: 12500, currency: "USD",
} }, null, 1);

type Sim = { path: PathStep[]; decision?: string | null; waiting_for?: string | null; explanation: string[] };
type Bt = { runs: number; changed: number; active_version: number; matrix: { before: string; after: string; runs: number }[];
  hits: { node_id: string; edge_id: string; runs: number }[]; samples: { run_id: string; before: string; after: string }[] };

export function TryPanel({ draft, onPath }: { draft: Workflow; onPath: (steps: PathStep[] | null) => void }) {
  const [eventText, setEventText] = useState(sample);
  const [runId, setRunId] = useState("");
  const [sim, setSim] = useState<Sim | null>(null);
  const [bt, setBt] = useState<Bt | null>(null);
  const [limit, setLimit] = useState(1000);
  const [error, setError] = useState("");

  async function simulate(e: React.FormEvent) {
    e.preventDefault();
    setError("");
    let event = undefined;
    if (!runId) {
      try { event = JSON.parse(eventText); } catch { setError("The event is not valid JSON"); return; }
    }
    const r = await api.POST("/v1/console/simulate", { body: { workflow: draft, event, run_id: runId || null } });
    if (!r.response.ok || !r.data) { setError(errorText(r.error)); return; }
    setSim(r.data); onPath(r.data.path);
  }
  async function backtest(e: React.FormEvent) {
    e.preventDefault();
    setError("");
    const r = await api.POST("/v1/console/backtest", { body: { workflow: draft, limit } });
    if (!r.response.ok || !r.data) { setError(errorText(r.error)); return; }
    setBt(r.data as Bt);
  }
  return (
    <section className="try" aria-label="Try the draft">
      <div className="split">
        <form onSubmit={simulate} aria-label="Simulate">
          <h2>Simulate</h2>
          <label className="field"><span>Event (JSON)</span><textarea rows={6} cols={50} value={eventText} onChange={(e) => setEventText(e.target.value)} disabled={!!runId} /></label>
          <label className="field"><span>or a past run's inputs (run id)</span><input value={runId} onChange={(e) => setRunId(e.target.value.trim())} /></label>
          <button type="submit">Simulate</button>{" "}
          {sim && <button type="button" onClick={() => { setSim(null); onPath(null); }}>Clear path</button>}
          {sim && <p role="status" data-testid="sim-outcome">Outcome: <strong>{sim.decision ?? `waits for ${sim.waiting_for}`}</strong></p>}
          {sim && <ol>{sim.explanation.map((l, i) => <li key={i}>{l}</li>)}</ol>}
        </form>
        <form onSubmit={backtest} aria-label="Backtest">
          <h2>Backtest against the active version</h2>
          <label className="field"><span>Most recent runs</span><input type="number" min={1} max={5000} value={limit} onChange={(e) => setLimit(Number(e.target.value))} /></label>
          <button type="submit">Backtest</button>
          {bt && <div data-testid="backtest">
            <p><strong>{bt.changed}</strong> of {bt.runs} runs change decision against v{bt.active_version}.</p>
            <table className="list"><caption>Decisions: active version → draft</caption>
              <thead><tr><th>Before</th><th>After</th><th>Runs</th></tr></thead>
              <tbody>{bt.matrix.map((m) => <tr key={`${m.before}>${m.after}`} className={m.before !== m.after ? "changed" : ""}><td>{m.before}</td><td>{m.after}</td><td>{m.runs}</td></tr>)}</tbody>
            </table>
            <table className="list"><caption>Hits per edge of the draft</caption>
              <thead><tr><th>Edge</th><th>Runs</th></tr></thead>
              <tbody>{bt.hits.map((h) => <tr key={`${h.node_id}/${h.edge_id}`}><td>{h.node_id} → {h.edge_id}</td><td>{h.runs}</td></tr>)}</tbody>
            </table>
            {bt.samples.length > 0 && <><h3>Changed runs</h3><ul>{bt.samples.map((s) => <li key={s.run_id}><a href={`/console/runs/${s.run_id}`}>{s.run_id}</a>: {s.before} → {s.after}</li>)}</ul></>}
          </div>}
        </form>
      </div>
      {error && <p className="error" role="alert">{error}</p>}
    </section>
  );
}
