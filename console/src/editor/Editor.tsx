// The DAG editor: canvas, outline, inspector (node fields, ordered edges with CEL criteria),
// problems panel, undo/redo, draft save with If-Match, and publish through a diff dialog.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { Link } from "@tanstack/react-router";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { api, ApiError, errorText, must } from "../api/client";
import { atLeast, useMe } from "../auth";
import * as g from "../model/graph";
import * as h from "../model/history";
import { placeProblems, problemsFrom422 } from "../model/problems";
import type { Edge, NodeKind, Problem, Scope, WfNode, Workflow } from "../model/types";
import { Canvas } from "./Canvas";
import { CriteriaEditor } from "./CriteriaEditor";
import { PublishDialog } from "./PublishDialog";
import { TryPanel } from "./TryPanel";
import { pathOverlay, type PathStep } from "../model/path";

const kinds: NodeKind[] = ["score", "app", "review_queue", "webhook", "decision", "event"];
const actions = ["approve", "block", "cancel_order", "ban_user", "hold"];

async function loadDraft(id: string): Promise<{ wf: Workflow; etag: string | null }> {
  const r = await api.GET("/v1/workflows/{workflow_id}/draft", { params: { path: { workflow_id: id } } });
  if (r.response.ok && r.data) return { wf: r.data.definition, etag: r.response.headers.get("ETag") };
  if (r.response.status !== 404) throw new ApiError(r.response.status, errorText(r.error));
  const versions = await must(api.GET("/v1/workflows/{workflow_id}/versions", { params: { path: { workflow_id: id } } }));
  const last = versions[versions.length - 1].version;
  const wf = await must(api.GET("/v1/workflows/{workflow_id}/versions/{version}", { params: { path: { workflow_id: id, version: last } } }));
  return { wf, etag: null };
}

function useCheck(wf: Workflow | null) {
  const [debounced, setDebounced] = useState(wf);
  useEffect(() => {
    const t = setTimeout(() => setDebounced(wf), 250);
    return () => clearTimeout(t);
  }, [wf]);
  return useQuery({
    queryKey: ["check", debounced],
    enabled: !!debounced,
    placeholderData: (prev) => prev,
    queryFn: async (): Promise<{ problems: Problem[]; scopes: Record<string, Scope> }> => {
      const r = await api.POST("/v1/workflows/check", { body: debounced! });
      if (r.response.status === 422) {
        const detail = (r.error as { detail: never[] }).detail;
        return { problems: problemsFrom422(debounced!, detail), scopes: {} };
      }
      if (!r.response.ok || !r.data) throw new ApiError(r.response.status, errorText(r.error));
      return { problems: r.data.problems, scopes: r.data.scopes as Record<string, Scope> };
    },
  });
}

export function Editor({ workflowId }: { workflowId: string }) {
  const me = useMe();
  const canEdit = atLeast(me.data?.role, "manager");
  const qc = useQueryClient();
  const [hist, setHist] = useState<h.History<Workflow> | null>(null);
  const [etag, setEtag] = useState<string | null>(null);
  const [saved, setSaved] = useState<Workflow | null>(null);
  const [selected, setSelected] = useState<{ node?: string; edge?: g.EdgeKey }>({});
  const [status, setStatus] = useState("");
  const [conflict, setConflict] = useState(false);
  const [publishing, setPublishing] = useState(false);

  const load = useCallback(async () => {
    const { wf, etag } = await loadDraft(workflowId);
    setHist(h.start(wf)); setEtag(etag); setSaved(wf); setConflict(false);
  }, [workflowId]);
  useEffect(() => { load().catch((e) => setStatus(String(e.message ?? e))); }, [load]);

  const wf = hist?.present ?? null;
  const check = useCheck(wf);
  const problems = check.data?.problems ?? [];
  const placed = useMemo(() => placeProblems(problems), [problems]);
  const [simPath, setSimPath] = useState<PathStep[] | null>(null);
  const [trying, setTrying] = useState(false);
  const overlay = useMemo(() => ({ problems: placed, path: simPath && wf ? pathOverlay(wf.root, simPath) : undefined }),
    [placed, simPath, wf]);
  const dirty = wf !== null && saved !== null && JSON.stringify(wf) !== JSON.stringify(saved);

  const edit = useCallback((f: (w: Workflow) => Workflow, group: string | null = null) => {
    setHist((cur) => (cur ? h.push(cur, f(cur.present), group) : cur));
  }, []);
  const undo = useCallback(() => setHist((c) => (c ? h.undo(c) : c)), []);
  const redo = useCallback(() => setHist((c) => (c ? h.redo(c) : c)), []);

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (!(e.ctrlKey || e.metaKey) || !canEdit) return;
      const k = e.key.toLowerCase();
      if (k === "z" && !e.shiftKey) { e.preventDefault(); undo(); }
      else if ((k === "z" && e.shiftKey) || k === "y") { e.preventDefault(); redo(); }
      else if (k === "s") { e.preventDefault(); void save(); }
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  });

  async function save(): Promise<boolean> {
    if (!wf) return false;
    setStatus("Saving…");
    const r = await api.PUT("/v1/workflows/{workflow_id}/draft", {
      params: { path: { workflow_id: workflowId }, header: etag ? { "if-match": etag } : {} }, body: wf,
    });
    if (r.response.status === 409) {
      setConflict(true); setStatus("");
      return false;
    }
    if (!r.response.ok) { setStatus(`Not saved: ${errorText(r.error)}`); return false; }
    setEtag(r.response.headers.get("ETag")); setSaved(wf); setStatus("Draft saved");
    qc.invalidateQueries({ queryKey: ["workflows"] });
    return true;
  }

  async function openPublish() {
    if (dirty && !(await save())) return;
    setPublishing(true);
  }

  if (!wf) return <main className="page"><p>{status || "Loading…"}</p></main>;
  const node = selected.node ? wf.nodes.find((n) => n.id === selected.node) : undefined;
  const edgeSel = selected.edge?.split("/");

  return (
    <main className="editor">
      <div className="toolbar" role="toolbar" aria-label="Editor">
        <h1>{wf.name} <span className="muted">({wf.id}, event {wf.event_type})</span></h1>
        {canEdit && <AddNode wf={wf} onAdd={(kind, id) => {
          let made = "";
          edit((w) => { const [n, nid] = g.addNode(w, kind, id); made = nid; return n; });
          setTimeout(() => setSelected({ node: made }), 0);
        }} />}
        {canEdit && <>
          <button onClick={undo} disabled={!h.canUndo(hist!)} title="Ctrl+Z">Undo</button>
          <button onClick={redo} disabled={!h.canRedo(hist!)} title="Ctrl+Shift+Z">Redo</button>
          <button onClick={() => void save()} disabled={!dirty}>Save draft</button>
          <button className="primary" onClick={() => void openPublish()}>Publish…</button>
        </>}
        <button aria-expanded={trying} onClick={() => { setTrying(!trying); if (trying) setSimPath(null); }}>Simulate &amp; backtest</button>
        <Link to="/workflows/$workflowId/versions" params={{ workflowId }}>Versions</Link>
        <span role="status" className="muted">{status}{dirty ? " · unsaved changes" : ""}</span>
      </div>
      {conflict && (
        <div className="banner error" role="alert">
          Someone else saved this draft after you opened it (409). Your changes were not saved.{" "}
          <button onClick={() => void load()}>Reload their draft</button>
        </div>
      )}
      <div className="editor-body">
        <nav className="outline" aria-label="Nodes">
          <h2>Nodes</h2>
          <ul>
            {wf.nodes.map((n) => (
              <li key={n.id}>
                <button className={selected.node === n.id ? "current" : ""} aria-current={selected.node === n.id}
                  onClick={() => setSelected({ node: n.id })}>
                  {n.id} <span className="muted">{n.kind}</span>
                  {placed.byNode.has(n.id) || [...placed.byEdge.keys()].some((k) => k.startsWith(n.id + "/")) ? " ⚠" : ""}
                </button>
              </li>
            ))}
          </ul>
        </nav>
        <Canvas workflow={wf} overlay={overlay} selected={selected} label="Workflow graph"
          onSelect={(s) => setSelected(s.edge ? { node: s.edge.split("/")[0], edge: s.edge } : s)}
          onConnect={canEdit ? (s, t) => edit((w) => g.addEdge(w, s, t)[0]) : undefined}
          onDeleteNode={canEdit ? (id) => edit((w) => g.removeNode(w, id)) : undefined}
          onDeleteEdge={canEdit ? (k) => { const [n, e] = k.split("/"); edit((w) => g.removeEdge(w, n, e)); } : undefined} />
        <aside className="inspector" aria-label="Inspector">
          {node ? (
            <NodeInspector key={node.id} wf={wf} node={node} canEdit={canEdit} edit={edit}
              scope={check.data?.scopes[node.id] ?? {}} problems={problems} focusEdge={edgeSel?.[1]}
              onRemoved={() => setSelected({})} />
          ) : <p className="muted">Select a node in the list or on the graph.</p>}
        </aside>
      </div>
      <section className="problems" aria-label="Problems">
        <h2>Problems ({problems.length}){check.isFetching ? " · checking…" : ""}</h2>
        {problems.length === 0 ? <p className="ok">No problems: this draft can be published.</p> : (
          <ul>
            {problems.map((p, i) => (
              <li key={i}>
                <button className="link" onClick={() => setSelected(p.edge_id && p.node_id ? { node: p.node_id, edge: g.edgeKey(p.node_id, p.edge_id) } : { node: p.node_id ?? undefined })}>
                  <code>{p.code}</code> {p.node_id ?? "workflow"}{p.edge_id ? ` → ${p.edge_id}` : ""}: {p.message}
                </button>
              </li>
            ))}
          </ul>
        )}
      </section>
      {trying && <TryPanel draft={wf} onPath={setSimPath} />}
      {publishing && <PublishDialog workflowId={workflowId} draft={wf} problems={problems}
        onClose={(published) => { setPublishing(false); if (published) { setStatus(`Published version ${published}`); qc.invalidateQueries(); } }} />}
    </main>
  );
}

function AddNode({ wf, onAdd }: { wf: Workflow; onAdd: (k: NodeKind, id: string) => void }) {
  const [kind, setKind] = useState<NodeKind>("decision");
  const [id, setId] = useState("");
  return (
    <form className="add-node" onSubmit={(e) => { e.preventDefault(); onAdd(kind, id.trim()); setId(""); }}>
      <label>Kind <select value={kind} onChange={(e) => setKind(e.target.value as NodeKind)}>
        {kinds.filter((k) => k !== "event" || !wf.nodes.some((n) => n.kind === "event")).map((k) => <option key={k}>{k}</option>)}
      </select></label>
      <label>Id <input value={id} onChange={(e) => setId(e.target.value)} pattern="[A-Za-z_][A-Za-z0-9_]*" size={12} /></label>
      <button type="submit">Add node</button>
    </form>
  );
}

function Field({ label, children }: { label: string; children: React.ReactNode }) {
  return <label className="field"><span>{label}</span>{children}</label>;
}

function NodeInspector({ wf, node, canEdit, edit, scope, problems, focusEdge, onRemoved }: {
  wf: Workflow; node: WfNode; canEdit: boolean; edit: (f: (w: Workflow) => Workflow, group?: string | null) => void;
  scope: Scope; problems: Problem[]; focusEdge?: string; onRemoved: () => void;
}) {
  const set = (patch: Partial<WfNode>, group?: string) => edit((w) => g.updateNode(w, node.id, patch), group ?? null);
  const edges = g.orderedEdges(node.edges ?? []);
  const [target, setTarget] = useState("");
  const [dragging, setDragging] = useState<string | null>(null);
  const ro = !canEdit;
  const others = wf.nodes.filter((n) => n.id !== node.id && n.kind !== "event");
  const focusRef = useRef<HTMLLIElement>(null);
  useEffect(() => { focusRef.current?.scrollIntoView?.({ block: "nearest" }); }, [focusEdge]);
  return (
    <div>
      <h2>{node.kind.replace("_", " ")} <code>{node.id}</code></h2>
      <Field label="Name"><input value={node.name ?? ""} readOnly={ro} onChange={(e) => set({ name: e.target.value }, `name:${node.id}`)} /></Field>
      {node.kind === "decision" && <>
        <Field label="Action"><select value={node.action} disabled={ro} onChange={(e) => set({ action: e.target.value as never })}>
          {actions.map((a) => <option key={a}>{a}</option>)}</select></Field>
        <Field label="Reason"><input value={node.reason ?? ""} readOnly={ro} onChange={(e) => set({ reason: e.target.value }, `reason:${node.id}`)} /></Field>
      </>}
      {node.kind === "score" && <>
        <Field label="App"><input value={node.app ?? ""} readOnly={ro} onChange={(e) => set({ app: e.target.value }, `app:${node.id}`)} /></Field>
        <Field label="Scores (comma separated)"><input value={(node.scores ?? []).join(", ")} readOnly={ro}
          onChange={(e) => set({ scores: e.target.value.split(",").map((s) => s.trim()).filter(Boolean) }, `scores:${node.id}`)} /></Field>
      </>}
      {node.kind === "review_queue" && <>
        <Field label="Queue"><input value={node.queue} readOnly={ro} onChange={(e) => set({ queue: e.target.value }, `queue:${node.id}`)} /></Field>
        <Field label="Outcomes (comma separated)"><input value={(node.outcomes ?? []).join(", ")} readOnly={ro}
          onChange={(e) => set({ outcomes: e.target.value.split(",").map((s) => s.trim()).filter(Boolean) }, `outcomes:${node.id}`)} /></Field>
        <Field label="Time limit (ms)"><input type="number" value={node.time_limit_ms} readOnly={ro} onChange={(e) => set({ time_limit_ms: Number(e.target.value) }, `tl:${node.id}`)} /></Field>
      </>}
      {node.kind === "app" && <>
        <Field label="App URL"><input value={node.app} readOnly={ro} onChange={(e) => set({ app: e.target.value }, `app:${node.id}`)} /></Field>
        <Field label="Timeout (ms)"><input type="number" value={node.timeout_ms} readOnly={ro} onChange={(e) => set({ timeout_ms: Number(e.target.value) }, `to:${node.id}`)} /></Field>
      </>}
      {node.kind === "webhook" && <>
        <Field label="URL"><input value={node.url} readOnly={ro} onChange={(e) => set({ url: e.target.value }, `url:${node.id}`)} /></Field>
        <Field label="Secret name"><input value={node.secret_ref} readOnly={ro} onChange={(e) => set({ secret_ref: e.target.value }, `sr:${node.id}`)} /></Field>
      </>}
      {node.kind !== "decision" && (
        <section aria-label="Edges">
          <h3>Edges, in the order they are tried</h3>
          <ol className="edges">
            {edges.map((e: Edge, i) => {
              const key = g.edgeKey(node.id, e.id);
              const mine = problems.filter((p) => p.node_id === node.id && p.edge_id === e.id);
              return (
                <li key={e.id} ref={focusEdge === e.id ? focusRef : undefined}
                  className={`edge-row ${focusEdge === e.id ? "current" : ""} ${mine.length ? "has-problem" : ""}`}
                  draggable={canEdit && !e.default}
                  onDragStart={() => setDragging(e.id)}
                  onDragOver={(ev) => { if (dragging && !e.default) ev.preventDefault(); }}
                  onDrop={() => { if (dragging) edit((w) => g.moveEdge(w, node.id, dragging, i)); setDragging(null); }}
                  data-testid={`edge-row-${key}`}>
                  <div className="edge-head">
                    <span className="edge-order">{g.edgeLabel(e, i)}</span>
                    <code>{e.id}</code> →
                    <select aria-label={`Target of ${e.id}`} value={e.to} disabled={ro} onChange={(ev) => edit((w) => g.updateEdge(w, node.id, e.id, { to: ev.target.value }))}>
                      {[...others.map((n) => n.id), ...(others.some((n) => n.id === e.to) ? [] : [e.to])].map((id) => <option key={id}>{id}</option>)}
                    </select>
                    {canEdit && !e.default && <>
                      <button aria-label={`Move ${e.id} up`} disabled={i === 0} onClick={() => edit((w) => g.moveEdge(w, node.id, e.id, i - 1))}>↑</button>
                      <button aria-label={`Move ${e.id} down`} disabled={i >= edges.filter((x) => !x.default).length - 1} onClick={() => edit((w) => g.moveEdge(w, node.id, e.id, i + 1))}>↓</button>
                      <button onClick={() => edit((w) => g.makeDefault(w, node.id, e.id))}>Make default</button>
                    </>}
                    {canEdit && <button aria-label={`Remove edge ${e.id}`} onClick={() => edit((w) => g.removeEdge(w, node.id, e.id))}>✕</button>}
                  </div>
                  {e.default ? <p className="muted">Default: taken when no edge above holds.</p> : (
                    <CriteriaEditor value={e.criteria ?? ""} scope={scope} problems={mine} readOnly={ro}
                      label={`Criterion of edge ${e.id}`} id={`criteria-${e.id}`}
                      onChange={(v) => edit((w) => g.updateEdge(w, node.id, e.id, { criteria: v === "" ? null : v }), `crit:${key}`)} />
                  )}
                  {mine.map((p, j) => <p key={j} className="error" role="alert">{p.message}</p>)}
                </li>
              );
            })}
          </ol>
          {canEdit && (
            <form className="add-edge" onSubmit={(ev) => { ev.preventDefault(); if (target) edit((w) => g.addEdge(w, node.id, target)[0]); }}>
              <label>New edge to <select value={target} onChange={(ev) => setTarget(ev.target.value)}>
                <option value="">choose a node</option>
                {others.map((n) => <option key={n.id}>{n.id}</option>)}
              </select></label>
              <button type="submit" disabled={!target}>Add edge</button>
            </form>
          )}
        </section>
      )}
      {canEdit && node.id !== wf.root && (
        <button className="danger" onClick={() => { edit((w) => g.removeNode(w, node.id)); onRemoved(); }}>Remove node {node.id}</button>
      )}
    </div>
  );
}
