"""What each API call does, as async functions over a ``Service`` (route handlers stay thin).

Every change goes through ``service.submit`` (the log); reads use reader cursors on this node
(a follower may lag its leader by a few milliseconds) and fall back to the run store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

import workflows
from runner import egress, limits
from runner.errors import NotFound, RequestInvalid, RunFinished
from runner.runstore.base import RunRecord
from runner.service import Service
from runner.state import entries, queries
from runner.state.buffer import RUN_FIELDS
from runner.state.views import explain, presented, presented_encodable


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _apply(svc: Service, kind: str, payload: dict, raw: bytes | None = None) -> Any:
    """Append ``payload`` (already encoded as ``raw``, when given) and wait until applied."""
    applied = await svc.submit(kind, payload, raw=raw)
    return applied, reply_checked(svc, applied)


def reply_checked(svc: Service, applied: Any) -> Any:
    """The ``Reply`` apply gave an entry; a refusal raises the 4xx it names."""
    reply = svc.reply_of(applied)
    if not reply.ok:
        status = (reply.result or {}).get("status", 422)
        if status == 404:
            raise NotFound(reply.field or "payload", reply.error or "not found")
        raise RequestInvalid(reply.field or "payload", reply.error or "rejected", status)
    return reply


def _encode(payload: dict) -> bytes:
    """The entry payload; a value JSON cannot carry (a lone surrogate, an integer beyond 64
    bits) is refused naming its field."""
    try:
        return entries.encode(payload)
    except TypeError as exc:
        field = next((k for k, v in payload.items() if not _encodable(v)), "")
        raise RequestInvalid(field, f"not encodable as JSON: {exc}") from None


def _encodable(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def _read(svc: Service, fn, *args):
    cur = svc.reader()
    try:
        return fn(cur, *args)
    finally:
        cur.close()


# ---------------------------------------------------------------- events and runs
async def receive_event(svc: Service, event: dict, deadline_ms: int | None,
                        payload: bytes | None = None) -> dict:
    """``event`` is a validated ``EventIn``; ``payload`` its entry encoding, when the caller
    has it already (the hot path encodes once)."""
    order = event_order(svc, event, deadline_ms, payload)
    _, reply = await _apply(svc, entries.EVENT_RECEIVED, event, order.payload)
    return event_answer(svc, order, reply, await svc.wait_runs(reply.runs, order.deadline_at))


class EventOrder:
    """An order between its checks and its answer (``runner.api.hot`` answers without a task
    when every run settled at once: the same three steps as ``receive_event``)."""

    __slots__ = ("event", "payload", "deadline_ms", "deadline_at")

    def __init__(self, event: dict, payload: bytes, deadline_ms: int, deadline_at: int) -> None:
        self.event = event
        self.payload = payload
        self.deadline_ms = deadline_ms
        self.deadline_at = deadline_at


def event_order(svc: Service, event: dict, deadline_ms: int | None,
                payload: bytes | None = None) -> EventOrder:
    """The checks before an order is appended; a refusal raises the 4xx naming the field."""
    s = svc.settings
    deadline_ms = min(deadline_ms or s.request_deadline_ms_default, s.request_deadline_ms_max)
    deadline_at = _now_ms() + deadline_ms
    if payload is None:
        payload = _encode(event)
    limits.check_event(event["event_id"], event["data"], payload)
    return EventOrder(event, payload, deadline_ms, deadline_at)


def event_answer(svc: Service, order: EventOrder, reply: Any, views: list[dict]) -> dict:
    """The answer to an applied order whose runs are ``views`` (as ``wait_runs`` left them)."""
    return _answer(svc, order, reply, [presented(r) for r in views])


def event_answer_json(svc: Service, order: EventOrder, reply: Any, views: list[dict]) -> bytes:
    """``orjson.dumps(event_answer(...))``, the same bytes, without the path's step dicts
    (``presented_encodable``): the hot path's answer, made on the apply loop."""
    return orjson.dumps(_answer(svc, order, reply, [presented_encodable(r) for r in views]))


def _answer(svc: Service, order: EventOrder, reply: Any, runs: list[dict]) -> dict:
    """The answer with ``runs`` as presented, the order counted as answered now."""
    svc.telemetry.order_answered(runs, (_now_ms() - order.deadline_at + order.deadline_ms)
                                 / 1000)
    return {"event_id": order.event["event_id"], "offset": reply.result["offset"],
            "duplicate": reply.result["duplicate"], "runs": runs}


def get_run(svc: Service, run_id: str) -> dict:
    run = svc.sm.peek_run(run_id) or _read(svc, queries.run, run_id)
    if run is not None:
        return presented(run)
    stored = svc.run_store.get(run_id)
    if stored is None:
        raise NotFound("run_id", f"no run {run_id}")
    return view_of_record(stored)


def run_event(svc: Service, run_id: str) -> dict | None:
    """The event a run ran on: from rows not yet flushed, else DuckDB, else the run store (a
    run just applied may be in neither of the last two: the store is written tens of ms
    later). The pending rows are read first, so a generation landing meanwhile is found in
    DuckDB."""
    pending = svc.sm.peek_pending()[0].get(run_id)
    if pending is not None:
        row = (pending[RUN_FIELDS.index("event")],)
    else:
        row = _read(svc, lambda cur: cur.execute(
            "SELECT event FROM runs WHERE run_id = ?", [run_id]).fetchone())
    if row is not None:
        return orjson.loads(row[0]) if isinstance(row[0], str) else row[0]
    stored = svc.run_store.get(run_id)
    return None if stored is None else stored.event


def event_runs(svc: Service, event_id: str) -> list[dict]:
    """The runs of an event the hot state holds; once dedup forgot it, every run the run store
    holds for its id (each sighting's, oldest first), a run still in the hot state as it is
    there (it may be newer than its stored version)."""
    runs = svc.sm.peek_event(event_id)
    if runs is None:
        runs = _read(svc, queries.runs_for_event, event_id)
    if runs is not None:
        return [presented(r) for r in runs]
    try:
        stored = svc.run_store.lookup("event", event_id)
    except ValueError as exc:  # not an indexable id (the API refuses such events)
        raise NotFound("event_id", f"no event {event_id}: {exc}") from None
    out = []
    for record in sorted(stored, key=lambda r: (r.started_ts, r.run_id)):
        if record.event_id != event_id:
            continue
        hot = svc.sm.peek_run(record.run_id) or _read(svc, queries.run, record.run_id)
        out.append(presented(hot) if hot is not None else view_of_record(record))
    if not out:
        raise NotFound("event_id", f"no event {event_id}")
    return out


def lookup_runs(svc: Service, kind: str, value: str, limit: int) -> list[dict]:
    try:
        return [view_of_record(r) for r in svc.run_store.lookup(kind, value, limit)]
    except ValueError as exc:
        raise RequestInvalid(kind, str(exc)) from None


def view_of_record(r: RunRecord) -> dict:
    return {"run_id": r.run_id, "event_id": r.event_id, "workflow_id": r.workflow_id,
            "workflow_version": r.workflow_version, "state": r.state, "decision": r.decision,
            "node_id": r.path[-1]["next_node_id"] if r.path else "", "waiting_for": None,
            "path": r.path, "explanation": explain(r.path), "metrics": r.metrics,
            "scores": r.scores, "apps": r.apps, "offset": r.offset, "started_ts": r.started_ts,
            "updated_ts": r.updated_ts}


async def app_completed(svc: Service, run_id: str, node_id: str, result: dict,
                        raw: bytes | None = None) -> dict:
    """``raw``: the entry payload already encoded (the hot path encodes once)."""
    payload = {"run_id": run_id, "node_id": node_id, "result": result}
    raw = _encode(payload) if raw is None else raw
    if len(raw) > limits.event_bytes_max:
        raise RequestInvalid("result", f"encodes to {len(raw)} bytes, more than "
                                       f"{limits.event_bytes_max}", 413)
    limits.check_fields(result, "result")
    async with _finished_if_gone(svc, run_id):
        _, reply = await _apply(svc, entries.APP_COMPLETED, payload, raw)
    return presented(reply.runs[0])


@contextlib.asynccontextmanager
async def _finished_if_gone(svc: Service, run_id: str):
    """A ``NotFound`` inside becomes ``RunFinished`` (409) when the run left the hot state and
    the run store holds it: a late app answer or review action, which a run still held would
    have ignored (200, ``ignored``), gets a clear answer instead of "no task"."""
    try:
        yield
    except NotFound as exc:
        stored = await asyncio.to_thread(_stored_elsewhere, svc, run_id)
        if stored is None:
            raise
        raise RunFinished(run_id, stored.state, stored.decision) from exc


def _stored_elsewhere(svc: Service, run_id: str) -> RunRecord | None:
    """The run store's version of a run the hot state no longer holds (None if it holds it,
    or the store has none or cannot answer now: then the 404 stands)."""
    if svc.sm.peek_run(run_id) is not None or _read(svc, queries.run, run_id) is not None:
        return None
    try:
        return svc.run_store.get(run_id)
    except Exception:  # noqa: BLE001 - the store is down: the caller's 404 stands
        return None


# ---------------------------------------------------------------- workflows
def _parse_workflow(definition: dict) -> workflows.Workflow:
    try:
        return workflows.Workflow.model_validate(definition)
    except Exception as exc:  # noqa: BLE001 - pydantic's error names the field
        raise RequestInvalid("definition", " ".join(str(exc).split())) from None


def _check_egress(svc: Service, definition: dict) -> None:
    s = svc.settings
    problems = egress.workflow_problems(definition, s.allowed_url_prefixes, s.webhook_secrets)
    if problems:
        field, message = problems[0]
        raise RequestInvalid(field, message)


async def save_draft(svc: Service, workflow_id: str, definition: dict, user: str,
                     create: bool, if_match: str | None = None) -> dict:
    _check_egress(svc, definition)
    if definition.get("id") != workflow_id:
        raise RequestInvalid("id", f"must equal the workflow id in the path ({workflow_id})")
    exists = any(w["workflow_id"] == workflow_id for w in _read(svc, queries.workflows))
    if create and exists:
        raise RequestInvalid("id", f"workflow {workflow_id} exists; edit its draft", 409)
    if not create and not exists:
        raise NotFound("workflow_id", f"no workflow {workflow_id}")
    payload = {"workflow_id": workflow_id, "definition": definition, "by": user}
    if if_match is not None:
        payload["if_match"] = if_match
    _, reply = await _apply(svc, entries.WORKFLOW_DRAFT_SAVED, payload)
    return {"workflow_id": workflow_id, "definition": definition,
            "problems": reply.result["problems"]}


def get_draft(svc: Service, workflow_id: str) -> dict:
    draft = _read(svc, queries.draft, workflow_id)
    if draft is None:
        raise NotFound("workflow_id", f"workflow {workflow_id} has no draft")
    known = [m["name"] for m in _read(svc, queries.metrics)]
    wf = _parse_workflow(draft["definition"])
    problems = [str(p) for p in workflows.validate(wf, known_metrics=known)]
    return {"workflow_id": workflow_id, "definition": draft["definition"], "problems": problems}


def validate(svc: Service, definition: dict) -> dict:
    known = [m["name"] for m in _read(svc, queries.metrics)]
    wf = _parse_workflow(definition)
    problems = [str(p) for p in workflows.validate(wf, known_metrics=known)]
    return {"valid": not problems, "problems": problems}


async def publish(svc: Service, workflow_id: str, user: str) -> dict:
    draft = _read(svc, queries.draft, workflow_id)
    if draft is not None:  # saved before the allow-list changed
        _check_egress(svc, draft["definition"])
    _, reply = await _apply(svc, entries.WORKFLOW_PUBLISHED,
                            {"workflow_id": workflow_id, "by": user})
    return reply.result


async def rollback(svc: Service, workflow_id: str, version: int, user: str) -> dict:
    old = _read(svc, queries.version_definition, workflow_id, version)
    if old is not None:  # published before the allow-list changed
        _check_egress(svc, old)
    _, reply = await _apply(svc, entries.WORKFLOW_ROLLED_BACK,
                            {"workflow_id": workflow_id, "version": version, "by": user})
    return reply.result


def versions(svc: Service, workflow_id: str) -> list[dict]:
    out = _read(svc, queries.versions, workflow_id)
    if not out:
        raise NotFound("workflow_id", f"workflow {workflow_id} has no published version")
    return out


def version(svc: Service, workflow_id: str, number: int) -> dict:
    definition = _read(svc, queries.version_definition, workflow_id, number)
    if definition is None:
        raise NotFound("version", f"workflow {workflow_id} has no version {number}")
    return definition


def diff(svc: Service, workflow_id: str, a: int, b: int | None) -> dict:
    """Version ``a`` against version ``b`` (the draft when ``b`` is None)."""
    before = workflows.Workflow.model_validate(version(svc, workflow_id, a))
    if b is None:
        after = _parse_workflow(get_draft(svc, workflow_id)["definition"])
    else:
        after = workflows.Workflow.model_validate(version(svc, workflow_id, b))
    return workflows.diff(before, after).model_dump(mode="json")


# ---------------------------------------------------------------- metrics
async def define_metric(svc: Service, text: str) -> dict:
    _, reply = await _apply(svc, entries.METRIC_DEFINED, {"text": text})
    return reply.result


async def drop_metric(svc: Service, name: str) -> dict:
    _, reply = await _apply(svc, entries.METRIC_DROPPED, {"name": name})
    return reply.result


# ---------------------------------------------------------------- review queue
def review_tasks(svc: Service, queue: str | None, status: str, limit: int) -> list[dict]:
    svc.sm.sync()  # every task applied so far, not only those flushed
    return _read(svc, queries.review_tasks, queue, status, limit)


review_claim_ttl_ms = 15 * 60 * 1000  # an analyst who walks away frees the task after this


async def claim(svc: Service, run_id: str, node_id: str, user: str,
                ttl_ms: int = review_claim_ttl_ms) -> dict:
    async with _finished_if_gone(svc, run_id):
        _, reply = await _apply(svc, entries.REVIEW_CLAIMED,
                                {"run_id": run_id, "node_id": node_id, "user": user,
                                 "ttl_ms": ttl_ms})
    return reply.result


async def unclaim(svc: Service, run_id: str, node_id: str, user: str, override: bool) -> dict:
    """Give a claimed task back to the queue (its claimer, or a manager for anyone's)."""
    async with _finished_if_gone(svc, run_id):
        _, reply = await _apply(svc, entries.REVIEW_CLAIMED,
                                {"run_id": run_id, "node_id": node_id, "user": user,
                                 "release": True, "override": override})
    return reply.result


async def decide(svc: Service, run_id: str, node_id: str, user: str, outcome: str,
                 override: bool, reason: str = "") -> dict:
    """A reviewer's outcome; apply checks the claim and the outcome on every replica."""
    async with _finished_if_gone(svc, run_id):
        await _review_task(svc, run_id, node_id)
        _, reply = await _apply(svc, entries.REVIEW_DECIDED,
                                {"run_id": run_id, "node_id": node_id, "user": user,
                                 "outcome": outcome, "override": override,
                                 **({"reason": reason} if reason else {})})
    return presented(reply.runs[0])


def app_secret(svc: Service, run_id: str, node_id: str) -> str:
    """The secret of the app that ``node_id`` of the run calls (``RAILFLOW_APP_SECRETS``),
    else the shared app secret; an app holding only its own secret answers only its nodes."""
    secrets = svc.settings.app_secrets
    if secrets:
        try:
            run = get_run(svc, run_id)
            definition = version(svc, run["workflow_id"], run["workflow_version"])
            node = next((n for n in definition["nodes"] if n["id"] == node_id), {})
        except (NotFound, KeyError):
            node = {}
        app = node.get("app")
        if app in secrets:
            return secrets[app]
    return svc.settings.app_secret


async def _review_task(svc: Service, run_id: str, node_id: str) -> dict:
    task = svc.sm.peek_task(run_id, node_id)  # a pending task: apply holds it
    if task is None:  # closed or unknown: DuckDB, with every row applied so far
        await asyncio.to_thread(svc.sm.sync)
        task = _read(svc, queries.review_task, run_id, node_id)
    if task is None or task["kind"] != "review":
        raise NotFound("run_id", f"no review task for run {run_id} at node {node_id}")
    return task


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)
