// The workflow drawn with React Flow: nodes with one output port per edge in edge order,
// edge labels with the order, criteria and problems; optional diff marks and a run's path.
import {
  Background, BaseEdge, Controls, EdgeLabelRenderer, Handle, Position, ReactFlow, ReactFlowProvider,
  getBezierPath, type Connection, type EdgeProps, type NodeChange, type NodeProps,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { layout, nodeHeightFor, nodeWidth, portGap } from "../layout/elk";
import type { Mark, DiffMarks } from "../model/diff";
import { toFlow, type EdgeKey, type FlowEdge, type FlowNode } from "../model/graph";
import type { PlacedProblems } from "../model/problems";
import type { Problem, Workflow } from "../model/types";

export interface EdgeRunInfo { value: boolean | null; error?: string | null; taken: boolean; defaultTaken: boolean }
export interface Overlay {
  problems?: PlacedProblems;
  marks?: DiffMarks;
  path?: { nodes: Set<string>; edges: Map<EdgeKey, EdgeRunInfo> };
}

function Highlighted({ text, problems }: { text: string; problems: Problem[] }) {
  const span = problems.find((p) => p.span)?.span;
  if (!span) return <code>{text}</code>;
  const [a, b] = span;
  return <code>{text.slice(0, a)}<mark className="err-span">{text.slice(a, b) || " "}</mark>{text.slice(b)}</code>;
}

function WfNodeView({ data, selected }: NodeProps) {
  const d = data as FlowNode["data"] & { problems: Problem[]; mark?: Mark; onPath?: boolean };
  const n = d.node;
  const detail = n.kind === "decision" ? n.action : n.kind === "review_queue" ? n.queue
    : n.kind === "score" ? (n.scores ?? []).join(", ") : n.kind === "app" || n.kind === "webhook" ? (n.kind === "app" ? n.app : n.url) : "";
  const cls = ["wf-node", `kind-${n.kind}`, d.problems.length ? "has-problem" : "", d.mark ? `mark-${d.mark}` : "",
    d.onPath ? "on-path" : "", selected ? "selected" : ""].join(" ");
  return (
    <div className={cls} data-testid={`node-${n.id}`} style={{ minHeight: nodeHeightFor(d.outs) }}>
      {n.kind !== "event" && <Handle type="target" position={Position.Left} id="in" />}
      <div className="wf-kind">{n.kind.replace("_", " ")}{d.mark ? ` · ${d.mark}` : ""}</div>
      <div className="wf-id">{n.id}</div>
      {detail && <div className="wf-detail">{detail}</div>}
      {d.problems.length > 0 && <div className="wf-problem" role="note">⚠ {d.problems[0].message}</div>}
      {Array.from({ length: d.outs }, (_, i) => (
        <Handle key={i} type="source" position={Position.Right} id={`out-${i}`} style={{ top: 24 + i * portGap }} />
      ))}
    </div>
  );
}

function WfEdgeView(p: EdgeProps) {
  const d = p.data as FlowEdge["data"] & { problems: Problem[]; mark?: Mark; run?: EdgeRunInfo };
  const [path, lx, ly] = getBezierPath(p);
  const crit = d.edge.criteria ?? "";
  const cls = ["wf-edge", d.problems.length ? "has-problem" : "", d.mark ? `mark-${d.mark}` : "",
    d.run?.taken ? "taken" : "", p.selected ? "selected" : ""].join(" ");
  return (
    <>
      <BaseEdge id={p.id} path={path} className={cls} markerEnd={p.markerEnd} />
      <EdgeLabelRenderer>
        <div className={`edge-label ${cls}`} data-testid={`edge-${p.id}`}
          style={{ transform: `translate(-50%, -50%) translate(${lx}px,${ly}px)` }}>
          <span className="edge-order">{d.label}</span>
          {crit && <Highlighted text={crit.length > 48 ? crit.slice(0, 47) + "…" : crit} problems={d.problems} />}
          {d.mark && <span className="edge-mark">{d.mark}</span>}
          {d.run && d.run.value !== null && !d.edge.default && (
            <span className={`edge-value ${d.run.value ? "true" : "false"}`}>= {String(d.run.value)}</span>
          )}
          {d.run?.defaultTaken && <span className="edge-value true">default taken</span>}
          {d.run?.error && <span className="edge-error">{d.run.error}</span>}
          {d.problems.map((pr, i) => <div key={i} className="edge-problem" role="note">{pr.message}</div>)}
        </div>
      </EdgeLabelRenderer>
    </>
  );
}

const nodeTypes = { wf: WfNodeView };
const edgeTypes = { wf: WfEdgeView };

// What decides a node's handles: a node whose handles changed must be measured again.
function handleKey(n: FlowNode) {
  return `${n.data.node.kind}/${n.data.outs}`;
}

function structureKey(wf: Workflow) {
  return JSON.stringify(wf.nodes.map((n) => [n.id, (n.edges ?? []).map((e) => [e.to, e.default])]));
}

function measuredAs(m: { handles: string; width: number; height: number } | undefined, handles: string) {
  return m && m.handles === handles ? { width: m.width, height: m.height } : undefined;
}

export function Canvas(props: {
  workflow: Workflow; overlay?: Overlay; selected?: { node?: string; edge?: EdgeKey };
  onSelect?: (s: { node?: string; edge?: EdgeKey }) => void;
  onConnect?: (source: string, target: string) => void;
  onDeleteNode?: (id: string) => void; onDeleteEdge?: (key: EdgeKey) => void;
  label: string;
}) {
  const { workflow, overlay } = props;
  const [positions, setPositions] = useState<Record<string, { x: number; y: number }>>({});
  // React Flow hides a node until it has measured it and forgets the measure whenever a new node
  // object arrives (each overlay, selection or edit makes new ones); a node whose size did not
  // change is then never measured again and stays hidden. The measures are kept here, with the
  // handles they were taken with, and handed back with each node.
  const measures = useRef(new Map<string, { handles: string; width: number; height: number }>());
  const handlesNow = useRef(new Map<string, string>());
  const onNodesChange = useCallback((changes: NodeChange[]) => {
    for (const c of changes) {
      if (c.type !== "dimensions" || !c.dimensions) continue;
      const handles = handlesNow.current.get(c.id);
      if (handles !== undefined) measures.current.set(c.id, { handles, ...c.dimensions });
    }
  }, []);
  const key = structureKey(workflow);
  useEffect(() => {
    let live = true;
    layout(workflow).then((pos) => live && setPositions(pos)).catch(() => undefined);
    return () => { live = false; };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  const { nodes, edges } = useMemo(() => {
    const f = toFlow(workflow, positions);
    handlesNow.current = new Map(f.nodes.map((n) => [n.id, handleKey(n)]));
    const nodes = f.nodes.map((n) => ({
      ...n,
      measured: measuredAs(measures.current.get(n.id), handleKey(n)),
      // The laid-out size, so a node shows before the browser has measured it.
      initialWidth: nodeWidth, initialHeight: nodeHeightFor(n.data.outs),
      selected: props.selected?.node === n.id,
      data: { ...n.data, problems: overlay?.problems?.byNode.get(n.id) ?? [], mark: overlay?.marks?.nodes[n.id], onPath: overlay?.path?.nodes.has(n.id) },
    }));
    const edges = f.edges.map((e) => ({
      ...e, type: "wf", selected: props.selected?.edge === e.id,
      data: { ...e.data, problems: overlay?.problems?.byEdge.get(e.id) ?? [], mark: overlay?.marks?.edges[e.id], run: overlay?.path?.edges.get(e.id) },
    }));
    return { nodes, edges };
  }, [workflow, positions, overlay, props.selected]);

  const ready = Object.keys(positions).length > 0;
  return (
    <div className="canvas" aria-label={props.label} role="region">
      {ready && (
        <ReactFlowProvider>
          <ReactFlow
            nodes={nodes} edges={edges} nodeTypes={nodeTypes} edgeTypes={edgeTypes} fitView
            nodesDraggable={false} minZoom={0.2} onNodesChange={onNodesChange}
            onNodeClick={(_, n) => props.onSelect?.({ node: n.id })}
            onEdgeClick={(_, e) => props.onSelect?.({ edge: e.id })}
            onConnect={props.onConnect ? (c: Connection) => c.source && c.target && props.onConnect!(c.source, c.target) : undefined}
            onNodesDelete={props.onDeleteNode ? (ns) => ns.forEach((n) => props.onDeleteNode!(n.id)) : undefined}
            onEdgesDelete={props.onDeleteEdge ? (es) => es.forEach((e) => props.onDeleteEdge!(e.id)) : undefined}
            deleteKeyCode={props.onDeleteNode ? ["Delete", "Backspace"] : null}
            proOptions={{ hideAttribution: true }}
          >
            <Background />
            <Controls showInteractive={false} />
          </ReactFlow>
        </ReactFlowProvider>
      )}
      {!ready && <p className="muted">Laying out…</p>}
    </div>
  );
}
