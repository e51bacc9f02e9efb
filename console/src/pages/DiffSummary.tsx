// A structured diff as lists: nodes, edges (added, removed, changed, moved), criteria before/after.
import { criteriaChanges, diffIsEmpty } from "../model/diff";
import type { WorkflowDiff } from "../model/types";

export function DiffSummary({ diff }: { diff: WorkflowDiff }) {
  if (diffIsEmpty(diff)) return <p>No changes.</p>;
  const crit = criteriaChanges(diff);
  return (
    <div className="diff-summary" data-testid="diff-summary">
      <ul>
        {(diff.workflow ?? []).map((c) => <li key={c.field}>workflow {c.field} changed</li>)}
        {(diff.nodes_added ?? []).map((n) => <li key={`na${n}`} className="added">node {n} added</li>)}
        {(diff.nodes_removed ?? []).map((n) => <li key={`nr${n}`} className="removed">node {n} removed</li>)}
        {(diff.nodes_changed ?? []).map((n) => <li key={`nc${n.node_id}`} className="changed">node {n.node_id}: {n.changes.map((c) => c.field).join(", ")} changed</li>)}
        {(diff.edges_added ?? []).map((e) => <li key={`ea${e.edge_id}`} className="added">edge {e.node_id} → {e.edge_id} added</li>)}
        {(diff.edges_removed ?? []).map((e) => <li key={`er${e.edge_id}`} className="removed">edge {e.node_id} → {e.edge_id} removed</li>)}
        {(diff.edges_changed ?? []).map((e) => <li key={`ec${e.edge_id}`} className="changed">edge {e.node_id} → {e.edge_id}: {e.changes.map((c) => c.field === "position" ? `moved ${Number(c.before) + 1} → ${Number(c.after) + 1}` : c.field).join(", ")}</li>)}
      </ul>
      {crit.length > 0 && (
        <table>
          <caption>Criteria</caption>
          <thead><tr><th>Edge</th><th>Before</th><th>After</th></tr></thead>
          <tbody>
            {crit.map((c) => (
              <tr key={`${c.node_id}/${c.edge_id}`} className={c.kind}>
                <td>{c.node_id} → {c.edge_id}</td><td><code>{c.before ?? "—"}</code></td><td><code>{c.after ?? "—"}</code></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
