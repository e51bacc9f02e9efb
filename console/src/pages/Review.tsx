// The review queue: pending tasks with their deadline and claim; claim, give back, decide with
// a reason, then the next task.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { Link } from "@tanstack/react-router";
import { useEffect, useState } from "react";
import { api, errorText, must } from "../api/client";
import type { ReviewTask } from "../model/types";
import { useMe } from "../auth";

function until(ts: number | null | undefined, now: number): string {
  if (!ts) return "—";
  const s = Math.round((ts - now) / 1000);
  if (s <= 0) return "passed";
  if (s < 120) return `in ${s} s`;
  if (s < 7200) return `in ${Math.round(s / 60)} min`;
  return `in ${Math.round(s / 3600)} h`;
}

export function Review() {
  const me = useMe();
  const qc = useQueryClient();
  const [queue, setQueue] = useState("");
  const [now, setNow] = useState(Date.now());
  useEffect(() => { const t = setInterval(() => setNow(Date.now()), 5000); return () => clearInterval(t); }, []);
  const tasks = useQuery({
    queryKey: ["review", queue],
    queryFn: () => must(api.GET("/v1/review/tasks", { params: { query: queue ? { queue } : {} } })),
    refetchInterval: 5000,
  });
  const [current, setCurrent] = useState<string | null>(null);
  const list = tasks.data ?? [];
  const task = list.find((t) => `${t.run_id}/${t.node_id}` === current) ?? null;
  const [msg, setMsg] = useState("");
  const refresh = () => qc.invalidateQueries({ queryKey: ["review"] });

  async function act(t: ReviewTask, what: "claim" | "unclaim") {
    const r = await api.POST(`/v1/review/tasks/{run_id}/{node_id}/${what}`, { params: { path: { run_id: t.run_id, node_id: t.node_id } } });
    setMsg(r.response.ok ? (what === "claim" ? `Claimed ${t.run_id}` : `Gave ${t.run_id} back`) : errorText(r.error));
    setCurrent(`${t.run_id}/${t.node_id}`);
    await refresh();
  }

  return (
    <main className="page wide">
      <h1>Review queue</h1>
      <label className="field"><span>Queue</span><input value={queue} onChange={(e) => setQueue(e.target.value)} placeholder="all queues" /></label>
      <p role="status">{msg}</p>
      <div className="split">
        <table className="list" aria-label="Pending reviews">
          <thead><tr><th>Run</th><th>Queue</th><th>Deadline</th><th>Claimed by</th><th><span className="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {list.map((t) => {
              const mine = t.claimed_by === me.data?.name;
              const lapsed = t.claim_expires_ts != null && t.claim_expires_ts <= now;
              return (
                <tr key={`${t.run_id}/${t.node_id}`} className={current === `${t.run_id}/${t.node_id}` ? "current" : ""}>
                  <td><button className="link" onClick={() => setCurrent(`${t.run_id}/${t.node_id}`)}>{t.run_id}</button></td>
                  <td>{t.queue}</td>
                  <td>{until(t.deadline_ts, now)}</td>
                  <td>{t.claimed_by ? `${t.claimed_by}${lapsed ? " (claim lapsed)" : `, until ${new Date(t.claim_expires_ts ?? 0).toLocaleTimeString()}`}` : "—"}</td>
                  <td>
                    {(!t.claimed_by || lapsed) && <button onClick={() => void act(t, "claim")}>Claim {t.run_id}</button>}
                    {mine && <button onClick={() => void act(t, "unclaim")}>Give back</button>}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
        <div>
          {task ? <Decide key={`${task.run_id}/${task.node_id}`} task={task} onDone={async (text) => {
            setMsg(text);
            const rest = list.filter((t) => t !== task && (!t.claimed_by || t.claimed_by === me.data?.name));
            setCurrent(rest.length ? `${rest[0].run_id}/${rest[0].node_id}` : null);
            await refresh();
          }} /> : <p className="muted">{list.length ? "Choose a task." : "No pending review."}</p>}
        </div>
      </div>
    </main>
  );
}

function Decide({ task, onDone }: { task: ReviewTask; onDone: (msg: string) => void }) {
  const run = useQuery({ queryKey: ["run", task.run_id], queryFn: () => must(api.GET("/v1/console/runs/{run_id}", { params: { path: { run_id: task.run_id } } })) });
  const wf = useQuery({
    queryKey: ["version", run.data?.workflow_id, run.data?.workflow_version], enabled: !!run.data,
    queryFn: () => must(api.GET("/v1/workflows/{workflow_id}/versions/{version}", { params: { path: { workflow_id: run.data!.workflow_id, version: run.data!.workflow_version } } })),
  });
  const node = wf.data?.nodes.find((n) => n.id === task.node_id);
  const outcomes = node && node.kind === "review_queue" ? node.outcomes ?? [] : [];
  const [outcome, setOutcome] = useState("");
  const [reason, setReason] = useState("");
  const [error, setError] = useState("");
  async function decide(e: React.FormEvent) {
    e.preventDefault();
    const r = await api.POST("/v1/review/tasks/{run_id}/{node_id}/decide", {
      params: { path: { run_id: task.run_id, node_id: task.node_id } }, body: { outcome, reason },
    });
    if (!r.response.ok || !r.data) { setError(errorText(r.error)); return; }
    onDone(`Decided ${task.run_id}: ${outcome} → ${r.data.decision ?? r.data.state}`);
  }
  const data = (task.event as { data?: Record<string, unknown> }).data ?? {};
  return (
    <section aria-label="Task">
      <h2>Run <Link to="/runs/$runId" params={{ runId: task.run_id }}>{task.run_id}</Link></h2>
      <dl className="kv">
        {Object.entries({ ...data, ...Object.fromEntries(Object.entries(task.scores).map(([k, v]) => [`score ${k}`, v])) }).map(([k, v]) => <><dt key={`k${k}`}>{k}</dt><dd key={`v${k}`}>{String(v)}</dd></>)}
      </dl>
      <form onSubmit={decide} aria-label="Decide">
        <fieldset>
          <legend>Outcome</legend>
          {outcomes.map((o) => <label key={o}><input type="radio" name="outcome" value={o} checked={outcome === o} onChange={() => setOutcome(o)} /> {o}</label>)}
        </fieldset>
        <label className="field"><span>Reason</span><input value={reason} onChange={(e) => setReason(e.target.value)} /></label>
        {error && <p className="error" role="alert">{error}</p>}
        <button className="primary" type="submit" disabled={!outcome}>Decide</button>
      </form>
    </section>
  );
}
