"""Read-side queries for the API over a reader cursor (committed state; any thread)."""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from runner.state.views import RUN_COLUMNS, run_of_row

review_tasks_max = 500


def run(cur: duckdb.DuckDBPyConnection, run_id: str) -> dict | None:
    row = cur.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else run_of_row(row, cur)


def runs_for_event(cur: duckdb.DuckDBPyConnection, event_id: str) -> list[dict] | None:
    if cur.execute("SELECT 1 FROM events_seen WHERE event_id = ?", [event_id]).fetchone() is None:
        return None
    rows = cur.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE event_id = ? ORDER BY run_id",
                       [event_id]).fetchall()
    return [run_of_row(r, cur) for r in rows]


def review_tasks(cur: duckdb.DuckDBPyConnection, queue: str | None, status: str,
                 limit: int) -> list[dict]:
    sql = ("SELECT t.run_id, t.node_id, t.queue, t.status, t.deadline_ts, t.created_ts, "
           "t.claimed_by, t.outcome, r.event, r.scores, r.metrics, r.workflow_id "
           "FROM app_tasks t JOIN runs r USING (run_id) WHERE t.kind = 'review' AND t.status = ?")
    params: list[Any] = [status]
    if queue:
        sql += " AND t.queue = ?"
        params.append(queue)
    sql += " ORDER BY t.created_ts, t.run_id, t.node_id LIMIT ?"
    params.append(min(limit, review_tasks_max))
    out = []
    for (run_id, node, q, st, deadline, created, claimed, outcome, event, scores, metrics,
         wf) in cur.execute(sql, params).fetchall():
        outcome = orjson.loads(outcome) if outcome else None
        claim = outcome if st == "pending" else None  # a pending task's outcome is its claim
        out.append({"run_id": run_id, "node_id": node, "queue": q, "status": st,
                    "deadline_ts": deadline, "created_ts": created, "claimed_by": claimed,
                    "claim_expires_ts": (claim or {}).get("claim_expires_ts"),
                    "outcome": None if st == "pending" else outcome,
                    "event": orjson.loads(event), "scores": orjson.loads(scores),
                    "metrics": orjson.loads(metrics), "workflow_id": wf})
    return out


def review_task(cur: duckdb.DuckDBPyConnection, run_id: str, node_id: str) -> dict | None:
    row = cur.execute("SELECT kind, status, claimed_by, outcome FROM app_tasks "
                      "WHERE run_id = ? AND node_id = ?", [run_id, node_id]).fetchone()
    if row is None:
        return None
    claim = orjson.loads(row[3]) if row[1] == "pending" and row[3] else {}
    return {"kind": row[0], "status": row[1], "claimed_by": row[2],
            "claim_expires_ts": claim.get("claim_expires_ts")}


def app_task(cur: duckdb.DuckDBPyConnection, run_id: str, node_id: str) -> dict | None:
    return review_task(cur, run_id, node_id)


def workflows(cur: duckdb.DuckDBPyConnection) -> list[dict]:
    rows = cur.execute(
        "SELECT w.workflow_id, a.version, a.event_type, max(v.version), d.workflow_id IS NOT NULL "
        "FROM (SELECT workflow_id FROM workflow_versions UNION "
        "      SELECT workflow_id FROM workflow_drafts) w "
        "LEFT JOIN workflow_active a USING (workflow_id) "
        "LEFT JOIN workflow_versions v USING (workflow_id) "
        "LEFT JOIN workflow_drafts d USING (workflow_id) "
        "GROUP BY ALL ORDER BY w.workflow_id").fetchall()
    return [{"workflow_id": w, "active_version": a, "event_type": t, "latest_version": lv,
             "has_draft": bool(d)} for w, a, t, lv, d in rows]


def versions(cur: duckdb.DuckDBPyConnection, workflow_id: str) -> list[dict]:
    rows = cur.execute("SELECT version, event_type, published_ts, published_by "
                       "FROM workflow_versions WHERE workflow_id = ? ORDER BY version",
                       [workflow_id]).fetchall()
    return [{"version": v, "event_type": t, "published_ts": ts, "published_by": by}
            for v, t, ts, by in rows]


def version_definition(cur: duckdb.DuckDBPyConnection, workflow_id: str,
                       version: int) -> dict | None:
    row = cur.execute("SELECT definition FROM workflow_versions "
                      "WHERE workflow_id = ? AND version = ?", [workflow_id, version]).fetchone()
    return None if row is None else orjson.loads(row[0])


def draft(cur: duckdb.DuckDBPyConnection, workflow_id: str) -> dict | None:
    row = cur.execute("SELECT definition, updated_ts, updated_by FROM workflow_drafts "
                      "WHERE workflow_id = ?", [workflow_id]).fetchone()
    return None if row is None else {"definition": orjson.loads(row[0]), "updated_ts": row[1],
                                     "updated_by": row[2]}


def active_version(cur: duckdb.DuckDBPyConnection, workflow_id: str) -> int | None:
    row = cur.execute("SELECT version FROM workflow_active WHERE workflow_id = ?",
                      [workflow_id]).fetchone()
    return None if row is None else row[0]


def metrics(cur: duckdb.DuckDBPyConnection) -> list[dict]:
    rows = cur.execute("SELECT name, text, defined_ts FROM metric_defs ORDER BY name").fetchall()
    return [{"name": n, "text": t, "defined_ts": ts} for n, t, ts in rows]


def next_deadline(cur: duckdb.DuckDBPyConnection) -> int | None:
    row = cur.execute("SELECT min(deadline_ts) FROM app_tasks WHERE status = 'pending' "
                      "AND deadline_ts IS NOT NULL").fetchone()
    return row[0] if row else None


def counts(cur: duckdb.DuckDBPyConnection) -> dict[str, int]:
    out = {}
    for name in ("events_seen", "runs", "decisions"):
        out[name] = cur.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    out["unstored_runs"] = cur.execute(
        "SELECT count(*) FROM runs WHERE stored_offset < offset_").fetchone()[0]
    return out
