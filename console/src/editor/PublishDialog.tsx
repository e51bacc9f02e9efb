// Publish: the diff of the draft against the newest version first, then confirm.
import { useQuery } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import { api, errorText, must } from "../api/client";
import { DiffSummary } from "../pages/DiffSummary";
import type { Problem, Workflow } from "../model/types";

export function PublishDialog({ workflowId, draft, problems, onClose }: {
  workflowId: string; draft: Workflow; problems: Problem[]; onClose: (published?: number) => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const [error, setError] = useState("");
  useEffect(() => { ref.current?.showModal(); }, []);
  const diff = useQuery({
    queryKey: ["publish-diff", workflowId, draft],
    queryFn: async () => {
      const wfs = await must(api.GET("/v1/workflows"));
      const latest = wfs.find((w) => w.workflow_id === workflowId)?.latest_version ?? null;
      if (!latest) return { latest: null, diff: null };
      const d = await must(api.GET("/v1/workflows/{workflow_id}/diff", { params: { path: { workflow_id: workflowId }, query: { from: latest } } }));
      return { latest, diff: d };
    },
  });
  async function publish() {
    const r = await api.POST("/v1/workflows/{workflow_id}/publish", { params: { path: { workflow_id: workflowId } } });
    if (!r.response.ok || !r.data) { setError(errorText(r.error)); return; }
    ref.current?.close();
    onClose(r.data.version);
  }
  return (
    <dialog ref={ref} className="dialog" aria-labelledby="publish-title" onCancel={() => onClose()}>
      <h2 id="publish-title">Publish {workflowId}</h2>
      {diff.isLoading && <p>Loading the changes…</p>}
      {diff.data && (diff.data.latest === null
        ? <p>First version: {draft.nodes.length} nodes will go live.</p>
        : <><p>Changes against version {diff.data.latest}:</p><DiffSummary diff={diff.data.diff!} /></>)}
      {problems.length > 0 && <p className="error" role="alert">{problems.length} problems must be fixed before publishing.</p>}
      {error && <p className="error" role="alert">{error}</p>}
      <div className="actions">
        <button onClick={() => { ref.current?.close(); onClose(); }}>Cancel</button>
        <button className="primary" disabled={problems.length > 0 || diff.isLoading} onClick={() => void publish()}>
          Publish version {(diff.data?.latest ?? 0) + 1}
        </button>
      </div>
    </dialog>
  );
}
