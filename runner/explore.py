"""Read-only questions the console asks: find runs, count hits per edge, simulate one event
through a draft, backtest a draft over recent runs, and which workflows read each metric.

Nothing here writes to the log: simulate and backtest are pure walks of
:func:`workflows.advance` over inputs read from the state (or the run store). Callers pass a
started ``Service``; bad input raises ``RequestInvalid``/``NotFound`` (4xx naming the field).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

import workflows
from runner import operations as ops
from runner.errors import NotFound, RequestInvalid
from runner.service import Service
from runner.state import flows, queries
from runner.state.buffer import RUN_FIELDS
from runner.state.views import explain

runs_listed_max = 500
backtest_runs_max = 5_000
backtest_samples_max = 20


def _pending(svc: Service) -> tuple[dict[str, dict], list[tuple]]:
    """Runs (as dicts) and step rows applied but not yet flushed into DuckDB. Read before
    DuckDB: a generation landing meanwhile is then seen twice (deduplicated), never missed."""
    runs, steps = svc.sm.peek_pending()
    out = {}
    for run_id, row in runs.items():
        r = dict(zip(RUN_FIELDS, row, strict=True))
        for k in ("event", "metrics", "scores", "apps"):
            r[k] = orjson.loads(r[k]) if isinstance(r[k], str) else r[k]
        out[run_id] = r
    return out, steps


def _summary(r: dict) -> dict:
    data = r["event"].get("data") or {}
    text = (lambda v: None if v is None else str(v))  # noqa: E731 - two uses below
    return {"run_id": r["run_id"], "event_id": r["event_id"], "workflow_id": r["workflow_id"],
            "workflow_version": r["version"], "state": r["state"], "decision": r["decision"],
            "started_ts": r["started_ts"], "card": text(data.get("card")),
            "customer": text(data.get("customer")),
            "order_id": str(data.get("order_id") or r["event_id"])}


def find_runs(svc: Service, *, workflow_id: str | None = None, version: int | None = None,
              decision: str | None = None, state: str | None = None, order: str | None = None,
              card: str | None = None, customer: str | None = None, since_ts: int | None = None,
              until_ts: int | None = None, limit: int = 100) -> list[dict]:
    """Runs in the node's state matching every filter given, newest first."""
    where, params = [], []
    for column, value in (("workflow_id", workflow_id), ("version", version),
                          ("decision", decision), ("state", state)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if order is not None:
        where.append("(event_id = ? OR json_extract_string(event, '$.data.order_id') = ?)")
        params += [order, order]
    for key, value in (("card", card), ("customer", customer)):
        if value is not None:
            where.append(f"json_extract_string(event, '$.data.{key}') = ?")
            params.append(value)
    if since_ts is not None:
        where.append("started_ts >= ?")
        params.append(since_ts)
    if until_ts is not None:
        where.append("started_ts < ?")
        params.append(until_ts)
    sql = ("SELECT run_id, event_id, workflow_id, version, state, decision, started_ts, "
           "json_extract_string(event, '$.data.card'), "
           "json_extract_string(event, '$.data.customer'), "
           "coalesce(json_extract_string(event, '$.data.order_id'), event_id) FROM runs"
           + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY started_ts DESC, run_id LIMIT ?")
    params.append(min(limit, runs_listed_max))

    def query(cur):
        return cur.execute(sql, params).fetchall()

    keys = ("run_id", "event_id", "workflow_id", "workflow_version", "state", "decision",
            "started_ts", "card", "customer", "order_id")
    pending, _ = _pending(svc)
    found = {row[0]: dict(zip(keys, row, strict=True)) for row in ops._read(svc, query)}
    for run_id, r in pending.items():  # newer than DuckDB's row of the same run
        summary = _summary(r)
        if _matches(summary, workflow_id, version, decision, state, order, card, customer,
                    since_ts, until_ts):
            found[run_id] = summary
        else:
            found.pop(run_id, None)
    # The newest runs may still be in the apply buffer (not yet in DuckDB) but are already in
    # the run store: a lookup by order, card or customer finds them there.
    kind, value = next(((k, v) for k, v in (("order", order), ("card", card),
                                            ("customer", customer)) if v is not None),
                       (None, None))
    if kind is not None:
        try:
            stored = svc.run_store.lookup(kind, value, min(limit, runs_listed_max))
        except ValueError:  # a value no index holds ('/', too long): no stored run has it
            stored = []
        for r in stored:
            summary = {"run_id": r.run_id, "event_id": r.event_id, "workflow_id": r.workflow_id,
                       "workflow_version": r.workflow_version, "state": r.state,
                       "decision": r.decision, "started_ts": r.started_ts, "card": r.card,
                       "customer": r.customer, "order_id": r.order_id}
            if r.run_id not in found and _matches(summary, workflow_id, version, decision,
                                                  state, order, card, customer, since_ts,
                                                  until_ts):
                found[r.run_id] = summary
    out = sorted(found.values(), key=lambda x: (-x["started_ts"], x["run_id"]))
    return out[:min(limit, runs_listed_max)]


def _matches(s: dict, workflow_id, version, decision, state, order, card, customer, since_ts,
             until_ts) -> bool:
    wanted = {"workflow_id": workflow_id, "workflow_version": version, "decision": decision,
              "state": state, "card": card, "customer": customer}
    if any(v is not None and s[k] != v for k, v in wanted.items()):
        return False
    if order is not None and order not in (s["order_id"], s["event_id"]):
        return False
    if since_ts is not None and s["started_ts"] < since_ts:
        return False
    return until_ts is None or s["started_ts"] < until_ts


def run_detail(svc: Service, run_id: str) -> dict:
    """A run with the event it ran on (from the state, else the run store)."""
    view = dict(ops.get_run(svc, run_id))
    view["event"] = ops.run_event(svc, run_id) or {}
    return view


def edge_hits(svc: Service, workflow_id: str, version: int | None) -> list[dict]:
    """How many runs took each edge (of one version, or of all), steps not yet flushed
    included."""
    pending_runs, pending_steps = _pending(svc)
    sql = ("SELECT r.version, s.node_id, s.edge_id, count(*) FROM steps s JOIN runs r "
           "USING (run_id) WHERE r.workflow_id = ?")
    params: list[Any] = [workflow_id]
    if version is not None:
        sql += " AND r.version = ?"
        params.append(version)
    sql += " GROUP BY 1, 2, 3"
    counts: Counter = Counter()
    mine = [s for s in pending_steps if s[0] in pending_runs
            and pending_runs[s[0]]["workflow_id"] == workflow_id
            and (version is None or pending_runs[s[0]]["version"] == version)]

    def query(cur):
        rows = cur.execute(sql, params).fetchall()
        ids = sorted({s[0] for s in mine})
        landed = set()
        if ids:  # a pending generation may have landed since it was read: count it once
            marks = ", ".join("?" * len(ids))
            landed = set(cur.execute(f"SELECT run_id, seq FROM steps WHERE run_id IN ({marks})",
                                     ids).fetchall())
        return rows, landed

    rows, landed = ops._read(svc, query)
    for v, n, e, c in rows:
        counts[(v, n, e)] += c
    for s in mine:
        if (s[0], s[1]) not in landed:
            counts[(pending_runs[s[0]]["version"], s[2], s[4])] += 1
    return [{"version": v, "node_id": n, "edge_id": e, "runs": c}
            for (v, n, e), c in sorted(counts.items())]


def _known_metrics(svc: Service) -> list[str]:
    return [m["name"] for m in ops._read(svc, queries.metrics)]


def _compile(svc: Service, wf: workflows.Workflow) -> workflows.CompiledWorkflow:
    try:
        return workflows.compile_version(wf, 1, known_metrics=_known_metrics(svc))
    except workflows.WorkflowInvalid as exc:
        raise RequestInvalid("workflow", "; ".join(str(p) for p in exc.problems)) from None


def walk(compiled: workflows.CompiledWorkflow, event: dict, metrics: dict, scores: dict,
         apps: dict) -> dict:
    """Walk from the root with the inputs given; the built-in demo scorer runs in the walk
    (as it does in the runner), other outside work must be in ``scores``/``apps``."""
    scores, apps = dict(scores), {k: dict(v) for k, v in apps.items()}
    data = dict(event.get("data") or {})
    data.setdefault("event_id", event.get("event_id", "simulated"))
    steps: list[dict] = []
    node = None
    for _ in range(workflows.model.nodes_max):
        result = workflows.advance(compiled, {"event": data, "metrics": metrics,
                                              "scores": scores, "apps": apps}, node)
        steps += [s.to_dict() for s in result.steps]
        if result.waiting is not None and flows.is_builtin_scorer(result.waiting) \
                and result.node_id not in apps:
            produced = flows.builtin_result(result.waiting, event.get("data") or {})
            apps[result.node_id] = produced
            scores.update(produced)
            node = result.node_id
            continue
        return {"path": steps, "node_id": result.node_id,
                "decision": None if result.decision is None else result.decision.action,
                "waiting_for": None if result.waiting is None else result.waiting.kind,
                "explanation": explain(steps), "scores": scores}
    raise RequestInvalid("workflow", "the walk did not end")


def simulate(svc: Service, wf: workflows.Workflow, event: dict | None, run_id: str | None,
             metrics: dict, scores: dict, apps: dict) -> dict:
    """One event (or a past run's inputs) through ``wf``; nothing is written."""
    compiled = _compile(svc, wf)
    if run_id is not None:
        past = run_detail(svc, run_id)
        event = past["event"]
        metrics = {**past["metrics"], **metrics}
        scores, apps = {**past["scores"], **scores}, {**past["apps"], **apps}
    if event is None:
        raise RequestInvalid("event", "give an event or a run_id")
    return walk(compiled, event, metrics, scores, apps)


def backtest(svc: Service, wf: workflows.Workflow, limit: int) -> dict:
    """The draft against the active version over the most recent runs of the workflow."""
    draft = _compile(svc, wf)
    active = ops._read(svc, queries.active_version, wf.id)
    if active is None:
        raise NotFound("workflow_id", f"workflow {wf.id} has no active version to compare")
    base = workflows.Workflow.model_validate(ops.version(svc, wf.id, active))
    baseline = workflows.compile_version(base, active)
    limit = min(limit, backtest_runs_max)
    pending, _ = _pending(svc)
    sql = ("SELECT run_id, started_ts, event, metrics, scores, apps FROM runs "
           "WHERE workflow_id = ? ORDER BY started_ts DESC, run_id LIMIT ?")
    by_id = {row[0]: row for row in ops._read(svc, lambda cur: cur.execute(
        sql, [wf.id, limit]).fetchall())}
    for run_id, r in pending.items():
        if r["workflow_id"] == wf.id:
            by_id[run_id] = (run_id, r["started_ts"], r["event"], r["metrics"], r["scores"],
                             r["apps"])
    newest = sorted(by_id.values(), key=lambda row: (-row[1], row[0]))[:limit]
    rows = [(row[0], *row[2:]) for row in newest]
    matrix: Counter = Counter()
    hits: Counter = Counter()
    samples = []
    for run_id, *cols in rows:
        event, metrics, scores, apps = (orjson.loads(c) if isinstance(c, str) else c
                                        for c in cols)
        before = walk(baseline, event, metrics, scores, apps)
        after = walk(draft, event, metrics, scores, apps)
        b = before["decision"] or f"waiting:{before['waiting_for']}"
        a = after["decision"] or f"waiting:{after['waiting_for']}"
        matrix[(b, a)] += 1
        for s in after["path"]:
            hits[(s["node_id"], s["edge_id"])] += 1
        if a != b and len(samples) < backtest_samples_max:
            samples.append({"run_id": run_id, "before": b, "after": a,
                            "path": [s["edge_id"] for s in after["path"]]})
    return {"workflow_id": wf.id, "active_version": active, "runs": len(rows),
            "changed": sum(c for (b, a), c in matrix.items() if a != b),
            "matrix": [{"before": b, "after": a, "runs": c}
                       for (b, a), c in sorted(matrix.items())],
            "hits": [{"node_id": n, "edge_id": e, "runs": c} for (n, e), c in sorted(hits.items())],
            "samples": samples}


def metric_readers(svc: Service) -> dict[str, list[str]]:
    """Metric name -> the workflows whose active version or draft declares it."""
    out: dict[str, set[str]] = {m: set() for m in _known_metrics(svc)}
    for w in ops._read(svc, queries.workflows):
        wid = w["workflow_id"]
        definitions = []
        if w["active_version"]:
            definitions.append(ops.version(svc, wid, w["active_version"]))
        draft = ops._read(svc, queries.draft, wid)
        if draft is not None:
            definitions.append(draft["definition"])
        for d in definitions:
            for m in d.get("metrics") or []:
                out.setdefault(m, set()).add(wid)
    return {m: sorted(ws) for m, ws in sorted(out.items())}


