"""``RunnerStateMachine``: the DuckDB state and ``apply`` for every entry kind.

The hot kinds (an order, a run-store confirmation, an app's answer, a tick, a review's claim
or decision) are applied from plain structures the apply thread owns (dedup, the live runs
waiting for outside work, their pending tasks, timers); each entry's rows are staged and join
the write-behind buffer only once it applied. Every other kind (workflows, metrics, a new
leader) flushes the buffer and runs in one DuckDB transaction. A request that cannot be
applied (unknown workflow, bad metric text, ...) changes nothing and returns
``Reply(ok=False, field=...)`` instead of raising, identically on every node. Reads for the
API go through ``reader()`` cursors, which see committed state only and may run on other
threads, after ``sync`` when they need the newest rows.
"""

from __future__ import annotations

import heapq
from collections import deque
from pathlib import Path
from typing import Any

import duckdb
import orjson

from runner import ids
from runner.errors import InvariantViolation
from runner.state import digest, entries, flows, inputs, rejections, retention, schema, snapshot
from runner.state.buffer import RowBuffer, Stage
from runner.state.digest import MASK, row_hash, run_hash, step_hash, stored_hash
from runner.state.effects import (
    CallApp,
    EnqueueReview,
    Reply,
    RunChanged,
    SendWebhook,
    StoreRun,
)
from runner.state.etags import draft_etag
from runner.state.rejections import LOCAL_FAILURES, Rejected
from runner.state.steps import Step, node_of
from runner.state.views import RUN_COLUMNS, run_dict, run_of_row, steps_of
from workflows.errors import is_engine_error

__all__ = ["RUN_COLUMNS", "Rejected", "RunnerStateMachine"]

steps_per_run_max = 64
expired_per_tick_max = 5_000
event_bytes_max = 64 * 1024
# Dedup guarantee: an event id sent again less than this much log time after it was first
# applied gets the same runs back (a duplicate); later it is a new event. Memory holds one
# id per event in the window (about 150 bytes each: 1 h at 1,000 orders/s is ~0.5 GB).
DEDUP_RETENTION_MS_DEFAULT = 3_600_000
seen_expired_per_entry_max = 64  # ids forgotten per event: more than arrive, so it keeps up
DUCKDB_CHECKPOINT_THRESHOLD = "128MB"
# Kinds applied from the hot state without touching DuckDB (their rows go to the write-behind
# buffer). An app answer, a review or a tick reads DuckDB only for a task closed or unknown (a
# late or second answer, a run decided before the node) that no pending generation holds.
HOT_KINDS = frozenset({entries.EVENT_RECEIVED, entries.EFFECTS_DONE, entries.APP_COMPLETED,
                       entries.TICK, entries.REVIEW_CLAIMED, entries.REVIEW_DECIDED})
STREAM_OF_TYPE = {"order": "payments"}  # event type -> metric stream (default: the type)
TASK_COLUMNS = ("run_id, node_id, kind, queue, status, deadline_ts, created_ts, claimed_by, "
                "outcome")  # the order of buffer.TASK_FIELDS
STATUS, CLAIMED_BY, OUTCOME = 4, 7, 8  # in an app_tasks row


def stream_of(event_type: str) -> str:
    return STREAM_OF_TYPE.get(event_type, event_type)


class RunnerStateMachine:
    """The runner's replicated state. One thread applies; other threads only read."""

    def __init__(self, data_dir: Path, engine: Any | None = None, *,
                 dedup_retention_ms: int = DEDUP_RETENTION_MS_DEFAULT,
                 run_retention_ms: int = retention.RUN_RETENTION_MS_DEFAULT,
                 flush_phase: float = 0.0, capture_wait_s: float = 0.0) -> None:
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        # One DuckDB thread: the hot path never waits on DuckDB, and three nodes share 2 cores.
        # An in-memory database still checkpoints (compresses its tables) once this much was
        # written since the last: at DuckDB's 16 MB that was every ~15,000 W3 orders, and each
        # checkpoint's cost grows with the tables (a third of the flusher's CPU per order). A
        # larger threshold holds up to that much more uncompressed data between checkpoints.
        self.con = duckdb.connect(":memory:", config={
            "threads": 1, "checkpoint_threshold": DUCKDB_CHECKPOINT_THRESHOLD})
        schema.create(self.con)
        if engine is None:
            from metrics_engine.engine import Engine

            engine = Engine(self._dir / "metrics")
        self.engine = engine
        self._active: dict[str, tuple[int, str, Any]] = {}  # wf id -> (version, type, compiled)
        # event type -> its active workflows (id, version, compiled) by id: read per order,
        # cleared whenever ``_active`` changes
        self._of_type: dict[str, list[tuple[str, int, Any]]] = {}
        self._applied = -1
        # see buffer.handoff_entries, and ``RowBuffer.when_landed`` for a capture's wait
        self._buffer = RowBuffer(self.con, flush_phase, capture_wait_s)
        self._seen: dict[str, int] = {}  # event id -> offset, within the dedup retention
        # (ts, event id, its events_seen row's hash) in log order
        self._seen_order: deque[tuple[int, str, int]] = deque()
        self._dedup_retention_ms = dedup_retention_ms
        self.finished = retention.FinishedRuns(run_retention_ms)  # decided runs still held
        self._has_metrics = False
        self._stage = Stage()
        self._timers: dict[tuple[str, str], int] = {}  # pending task -> its deadline
        self._timer_heap: list[tuple[int, str, str]] = []  # (deadline, run, node), lazily pruned
        # The hot state of runs waiting for outside work: run id -> the run (never changed in
        # place: a resumed run is a copy), and each pending task's app_tasks row.
        self._live: dict[str, dict] = {}
        self._tasks: dict[tuple[str, str], tuple] = {}
        # The digest's sum of row hashes (``runner.state.digest``), kept entry by entry: the
        # small tables' part, each live run's (row hash, sum of its rows but stored_offset),
        # each pending webhook's row hash. A decided run's sum is kept in ``finished``.
        self._rows_total = 0
        self._cold_total = 0
        self._live_h: dict[str, tuple[int, int]] = {}
        self._outbox_h: dict[str, int] = {}
        self.rejections = rejections.RejectionLog()
        self._handlers = {
            entries.EVENT_RECEIVED: self._event_received,
            entries.APP_COMPLETED: self._app_completed,
            entries.TICK: self._tick,
            entries.WORKFLOW_DRAFT_SAVED: self._draft_saved,
            entries.WORKFLOW_PUBLISHED: self._published,
            entries.WORKFLOW_ROLLED_BACK: self._rolled_back,
            entries.METRIC_DEFINED: self._metric_defined,
            entries.METRIC_DROPPED: self._metric_dropped,
            entries.REVIEW_CLAIMED: self._review_claimed,
            entries.REVIEW_DECIDED: self._review_decided,
            entries.EFFECTS_DONE: self._effects_done,
            entries.LEADER_STARTED: self._leader_started,
        }

    # ----------------------------------------------------------------- protocol
    @property
    def applied_offset(self) -> int:
        return self._applied

    def apply(self, entry: Any) -> list[Any]:
        if entry.offset <= self._applied:
            raise InvariantViolation(f"offset {entry.offset} applied after {self._applied}")
        handler = self._handlers.get(entry.kind)
        if handler is None:  # replog's kinds other than LeaderStarted: no state of ours
            self._applied = entry.offset
            return []
        hot = entry.kind in HOT_KINDS
        if not hot:
            self.flush()  # the handler may query or update any row
            self.con.execute("BEGIN TRANSACTION")
        self._stage.reset()  # this entry's rows: absorbed only if it applies
        try:
            effects = handler(entry, entries.decode(entry.payload, entry.kind))
            if not hot:
                self.con.execute("COMMIT")
                cold = digest.scan_cold(self.con)  # a few rows: workflows, metric definitions
                self._rows_total = (self._rows_total + cold - self._cold_total) & MASK
                self._cold_total = cold
        except LOCAL_FAILURES:  # this node's environment failed, not the entry: stop here
            if not hot:
                self.con.execute("ROLLBACK")
            raise
        except BaseException as exc:  # a rejection, or a bug (a native panic too): never stops
            if not is_engine_error(exc):  # the log; an interrupt does
                raise
            if not hot:
                self.con.execute("ROLLBACK")
            effects = [self._reject(entry, exc)]
        else:  # an event's runs are new (their ids hold its offset): DuckDB inserts them
            self._commit_stage(runs_are_new=entry.kind == entries.EVENT_RECEIVED)
        self._applied = entry.offset
        # No flush after a handler that used DuckDB: its staged rows land after its own
        # statements whenever they go, and before the next such handler's (it flushes first).
        # A flush here cost each app answer, review or tick a generation of its own (~15 ms).
        self._buffer.maybe_hand_off(entry.ts, entry.offset)
        return effects

    def _commit_stage(self, runs_are_new: bool) -> None:
        stage = self._stage
        total = self._rows_total
        for event_id in stage.seen_expired:  # the oldest first, as staged
            total -= self._seen_order.popleft()[2]
            del self._seen[event_id]
        for row in stage.seen.values():
            event_id, _, offset, ts = row
            h = row_hash("events_seen", row)
            total += h
            self._seen[event_id] = offset
            self._seen_order.append((ts, event_id, h))
        finished, runs_delta = self._digest_runs(stage) if stage.runs or stage.tasks else ({}, 0)
        total += runs_delta
        total += self._digest_outbox(stage) if stage.outbox or stage.outbox_done else 0
        if stage.timers:
            self._set_timers(stage.timers)
        for key, row in stage.tasks.items():
            if row[STATUS] == "pending":
                self._tasks[key] = row
            else:
                self._tasks.pop(key, None)
        for run_id, run in stage.live.items():
            if run["state"] == "decided":
                self._live.pop(run_id, None)
            else:
                self._live[run_id] = run
        for run_id, offset in stage.stored.items():  # what the flush's UPDATE does to the row
            run = self._live.get(run_id)
            if run is not None and offset > run["stored_offset"]:
                offset = min(offset, run["offset"])  # never past its own version
                total += stored_hash(run_id, offset) - stored_hash(run_id, run["stored_offset"])
                self._live[run_id] = {**run, "stored_offset": offset}
        total += self.finished.commit(stage, finished)
        self._rows_total = total & MASK
        self._buffer.absorb(stage, runs_are_new)

    def _digest_runs(self, stage: Stage) -> tuple[dict[str, tuple[int, int]], int]:
        """Hash the entry's rows of runs and add them to each run's sum; returns each run the
        entry decided -> (its sum, its stored_offset), which ``finished`` keeps, and the
        change of the state's sum."""
        changed: dict[str, int] = {}  # run id -> the change of its rows' sum
        get = changed.get
        for key, row in stage.tasks.items():
            old = self._tasks.get(key)  # only pending tasks change
            changed[key[0]] = get(key[0], 0) + row_hash("app_tasks", row) - (
                0 if old is None else row_hash("app_tasks", old))
        for step in stage.steps:
            changed[step[0]] = get(step[0], 0) + step_hash(step)
        for run_id, row in stage.decisions.items():
            changed[run_id] = get(run_id, 0) + row_hash("decisions", row)
        live_h = self._live_h
        new_total = 0
        row_hashes = {}
        for run_id, row in stage.runs.items():
            h = row_hashes[run_id] = run_hash(row)
            held = live_h.get(run_id)
            if held is None:  # a new run: its stored_offset too
                new_total += stored_hash(run_id, row[digest.RUN_STORED])
                changed[run_id] = get(run_id, 0) + h
            else:
                changed[run_id] = get(run_id, 0) + h - held[0]
        finished = {}
        for run_id, delta in changed.items():
            new_total += delta
            held = live_h.get(run_id)
            entity = (delta + (0 if held is None else held[1])) & MASK
            run = stage.live.get(run_id)
            if run is not None and run["state"] == "decided":
                live_h.pop(run_id, None)
                finished[run_id] = (entity, run["stored_offset"])
            else:
                live_h[run_id] = (row_hashes[run_id] if run_id in row_hashes else held[0],
                                  entity)
        return finished, new_total

    def _digest_outbox(self, stage: Stage) -> int:
        """The change of the sum by webhook rows written (INSERT OR IGNORE) and sent."""
        delta = 0
        outbox = self._outbox_h
        for row in stage.outbox:
            if row[0] not in outbox:
                h = outbox[row[0]] = row_hash("outbox", row)
                delta += h
        for effect_id in stage.outbox_done:
            delta -= outbox.pop(effect_id, 0)
        return delta

    def _set_timers(self, changes: list[tuple[str, str, int | None]]) -> None:
        for run_id, node, deadline in changes:
            if deadline is None:
                self._timers.pop((run_id, node), None)
            else:
                self._timers[(run_id, node)] = deadline
                heapq.heappush(self._timer_heap, (deadline, run_id, node))
        heap = self._timer_heap
        while heap and self._timers.get((heap[0][1], heap[0][2])) != heap[0][0]:
            heapq.heappop(heap)  # closed or moved since: the top is always a pending deadline

    def next_deadline(self) -> int | None:
        """The earliest deadline of a pending app or review task (any thread; no DuckDB)."""
        heap = self._timer_heap
        try:
            return heap[0][0]
        except IndexError:
            return None

    def sync(self) -> None:
        """Make every applied entry visible to DuckDB readers (any thread; waits for it)."""
        self._buffer.sync()

    def _reject(self, entry: Any, exc: Exception) -> Reply:
        """The same rejection on every replica; anything but ``Rejected`` is a bug, recorded."""
        reason = "invalid" if isinstance(exc, Rejected) else "internal"
        rejected = exc if isinstance(exc, Rejected) else rejections.internal(exc)
        self.rejections.record(rejections.Rejection(
            entry.offset, entry.kind, entry.ts, rejected.field, rejected.status,
            rejected.message, reason))
        return Reply(ok=False, error=rejected.message, field=rejected.field,
                     result={"status": rejected.status})

    def flush(self) -> None:
        """Move buffered rows into DuckDB (apply thread only)."""
        self._buffer.flush()

    def peek_run(self, run_id: str) -> dict | None:
        """A run applied but not yet flushed, as apply left it (any thread; read only:
        ``views.presented`` makes what the API answers)."""
        return self._buffer.view(run_id)

    def peek_pending(self) -> tuple[dict[str, tuple], list[tuple]]:
        """Run rows and step rows applied but not yet in DuckDB (any thread)."""
        return self._buffer.pending()

    def peek_task(self, run_id: str, node_id: str) -> dict | None:
        """A pending app or review task as ``queries.review_task`` shows it, from the hot
        state (any thread; a closed task is only in DuckDB: None here)."""
        task = self._tasks.get((run_id, node_id))
        if task is None:
            return None
        claim = orjson.loads(task[OUTCOME]) if task[OUTCOME] else {}
        return {"kind": task[2], "status": task[STATUS], "claimed_by": task[CLAIMED_BY],
                "claim_expires_ts": claim.get("claim_expires_ts")}

    def peek_event(self, event_id: str) -> list[dict] | None:
        """The runs of an event while its generation is pending (as ``peek_run``)."""
        return self._buffer.views_of_event(event_id)

    def snapshot(self) -> snapshot.SnapshotWriter:
        """Capture the state at the applied offset without waiting for DuckDB or the disk: the
        engine's state in memory now (``Engine.capture``; its files made on other threads),
        the tables' view once the flusher wrote every pending generation (at the buffer's next
        hand-off, which the capture does not force: ``RowBuffer.when_landed``)."""
        view = self._buffer.when_landed(lambda: snapshot.open_view(self.con), held=True)
        # cut by the flusher right after it opened the view: the keys of the entries it holds
        changes = self._buffer.cut_changes(self._applied, held=True)
        return snapshot.capture(view, self.engine, self._applied, self._rows_total, changes)

    def restore(self, directory: Path) -> None:
        self.restore_chain([Path(directory)])

    def restore_chain(self, directories: list[Path]) -> None:
        """Restore a full snapshot and the deltas after it, oldest first
        (``snapshot.restore_chain``); later deltas are relative to the restored offset."""
        self._applied = snapshot.restore_chain(self.con, self.engine,
                                               [Path(d) for d in directories])
        self._buffer.reset_changes(self._applied)
        self._rebuild_active()
        sums = digest.scan(self.con)
        self._rows_total, self._cold_total = sums.total, sums.cold
        self._outbox_h = sums.outbox
        rows = self.con.execute(
            "SELECT event_id, offset_, ts FROM events_seen ORDER BY offset_").fetchall()
        self._seen = {event_id: offset for event_id, offset, _ in rows}
        self._seen_order = deque((ts, event_id, sums.seen[event_id])
                                 for event_id, _, ts in rows)
        self._timers, self._timer_heap = {}, []
        self._set_timers(self.con.execute(
            "SELECT run_id, node_id, deadline_ts FROM app_tasks WHERE status = 'pending' "
            "AND deadline_ts IS NOT NULL ORDER BY run_id, node_id").fetchall())
        self._tasks = {(row[0], row[1]): row for row in self.con.execute(
            f"SELECT {TASK_COLUMNS} FROM app_tasks WHERE status = 'pending' "
            "ORDER BY run_id, node_id").fetchall()}
        self._live, self._live_h = {}, {}
        for row in self.con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE state <> 'decided' "
                                    "ORDER BY run_id").fetchall():
            self._live_h[row[0]] = (run_hash(digest.parsed(row, digest.RUN_JSON)),
                                    sums.entities[row[0]])
            run = run_dict(row)
            run["path"] = []
            self._live[run["run_id"]] = run
        for run_id, trace in self.con.execute(
                "SELECT run_id, trace FROM steps WHERE run_id IN "
                "(SELECT run_id FROM runs WHERE state <> 'decided') ORDER BY run_id, seq"
                ).fetchall():
            self._live[run_id]["path"].append(orjson.loads(trace))
        self._has_metrics = bool(self._known_metrics())
        self.finished.rebuild(self.con, sums.entities)

    def digest(self) -> str:
        """The digest of the applied state (no DuckDB: apply keeps its sum of row hashes)."""
        engine = self.engine.digest() if hasattr(self.engine, "digest") else None
        return digest.value(self._rows_total, engine)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for reads from another thread (sees committed state)."""
        return self.con.cursor()

    def close(self) -> None:
        self._buffer.close()
        self.con.close()
        close = getattr(self.engine, "close", None)
        if close:
            close()

    # ----------------------------------------------------------------- events
    def _event_received(self, entry: Any, p: dict) -> list[Any]:
        event_id, etype, data = p["event_id"], p["type"], p.get("data") or {}
        if not isinstance(event_id, str) or not event_id:
            raise Rejected("event_id", "must be a non-empty string")
        if not isinstance(data, dict):
            raise Rejected("data", "must be an object")
        self._expire_seen(entry.ts)
        seen = self._seen.get(event_id)
        # exactly one run per event and workflow (within the retention): the same runs again
        if seen is not None and event_id not in self._stage.seen_expired:
            runs = self.peek_event(event_id)
            if runs is None:
                runs = [run_of_row(r, self.con) for r in self.con.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE event_id = ? ORDER BY run_id",
                    [event_id]).fetchall()]
            # only the runs of the sighting dedup holds: runs of an earlier one (the id sent
            # again after the dedup retention) may still be held by the run retention
            runs = [r for r in runs if r["run_id"] == ids.run_id(event_id, r["workflow_id"], seen)]
            return [Reply(ok=True, runs=runs, result={"duplicate": True, "offset": seen})]
        # All or nothing: whatever can refuse the event runs before anything changes; the
        # engine is fed only once the event passed, the runs are staged, and the event counts
        # as seen only when the stage is absorbed (a rejected event can be sent again).
        metric_values = self._ingest(etype, data, entry.ts)
        self._stage.seen[event_id] = (event_id, etype, entry.offset, entry.ts)
        event = {"event_id": event_id, "type": etype, "ts": p.get("ts"), "data": data}
        effects: list[Any] = []
        runs = []
        workflows = self._of_type.get(etype)
        if workflows is None:
            workflows = self._of_type[etype] = [
                (wf_id, version, compiled) for wf_id, (version, t, compiled)
                in sorted(self._active.items()) if t == etype]
        for wf_id, version, compiled in workflows:
            run = {
                "run_id": ids.run_id(event_id, wf_id, entry.offset), "event_id": event_id,
                "event_type": etype, "workflow_id": wf_id, "version": version, "state": "running",
                "node_id": flows.root(compiled), "decision": None, "started_ts": entry.ts,
                "updated_ts": entry.ts, "offset": entry.offset, "stored_offset": -1,
                "event": event, "metrics": metric_values, "scores": {}, "apps": {}, "path": [],
                "waiting_for": None,
            }
            effects += self._walk(run, compiled, entry)
            self._save_run(run)  # from here on the run is never changed: readers get it
            effects.append(StoreRun(run))
            runs.append(run)
        return [Reply(ok=True, runs=runs, result={"duplicate": False, "offset": entry.offset}),
                *effects]

    def _expire_seen(self, ts: int) -> None:
        """Stage forgetting the event ids first seen ``dedup_retention_ms`` or more before ``ts``
        (log time, the same on every replica), oldest first, a bounded number per entry."""
        horizon = ts - self._dedup_retention_ms
        expired = self._stage.seen_expired
        for seen_ts, event_id, _ in self._seen_order:
            if seen_ts > horizon or len(expired) >= seen_expired_per_entry_max:
                break
            expired.append(event_id)

    def _ingest(self, etype: str, data: dict, ts: int) -> dict[str, Any]:
        if not self._has_metrics:
            return {}
        return inputs.ingest(self.engine, stream_of(etype), data, ts)

    # ----------------------------------------------------------------- the walk
    def _walk(self, run: dict, compiled: Any, entry: Any) -> list[Any]:
        """Walk from ``run['node_id']`` with the one walk of ``workflows`` (the backtest's too)
        until a decision or outside work; a built-in score is answered here and walked on."""
        effects: list[Any] = []
        stage = self._stage
        # One context for every round: it holds the run's own scores and apps dicts, which a
        # round changes in place only (a score answered here, a webhook sent)
        ctx = flows.context(run, compiled=compiled)
        for _ in range(steps_per_run_max):  # each round passes at least one node
            # the walk's fields unpacked at once: a named tuple's attribute is a descriptor
            # looked up on its type at each read
            steps, node, decision, work, webhooks = flows.advance(compiled, ctx, run["node_id"])
            if webhooks:
                before = [node_of(s) for s in run["path"]]
            # Each step as a fact (``runner.state.steps``), no dict: its row holds the step's
            # JSON bytes (the digest hashes them now, the flusher stores their text).
            path, ts = run["path"], entry.ts
            for result in steps:
                seq = len(path)
                step = Step(result, seq, ts)
                path.append(step)
                stage.steps.append((run["run_id"], seq, result.node_id, result.node_kind,
                                    result.edge_id, result.next_node_id, step.to_json(), ts))
            for hook in webhooks:  # fired on the way, never awaited
                at = next(i for i, s in enumerate(steps) if s.next_node_id == hook.node_id)
                passed = before + [s.node_id for s in steps[:at + 1]]
                effects.append(self._webhook(run, hook.node_id, hook, passed))
                run["apps"][hook.node_id] = dict(flows.WEBHOOK_SENT)
            run["node_id"] = node
            if decision is not None:
                run["state"], run["decision"] = "decided", decision.action
                stage.decisions[run["run_id"]] = (
                    run["run_id"], decision.action, entry.ts, entry.offset)
                self.finished.decided(stage, entry.ts, entry.offset, run["run_id"],
                                      run["event_id"])
                return effects
            if flows.is_builtin_scorer(work):
                result = flows.builtin_result(work, run["event"]["data"])
                run["apps"][node] = result
                run["scores"].update(result)
                continue
            effects.append(self._open_task(run, node, work, entry))
            run["state"] = "waiting"
            run["waiting_for"] = "review" if work.kind == "review_queue" else "app"
            return effects
        raise InvariantViolation(f"run {run['run_id']} exceeded {steps_per_run_max} walks")

    def _open_task(self, run: dict, node: str, info: Any, entry: Any) -> Any:
        deadline = entry.ts + info.timeout_ms
        self._stage.timers.append((run["run_id"], node, deadline))
        kind = "review" if info.kind == "review_queue" else "app"
        self._stage.tasks[(run["run_id"], node)] = (
            run["run_id"], node, kind, info.queue, "pending", deadline, entry.ts, None, None)
        if kind == "review":
            return EnqueueReview(run["run_id"], node, info.queue or "default")
        return self._call_app_effect(run, node, info)

    @staticmethod
    def _call_app_effect(run: dict, node: str, info: Any) -> CallApp:
        return CallApp(run["run_id"], node, info.app or "", info.timeout_ms or 0,
                       {"run_id": run["run_id"], "node_id": node, "event": run["event"],
                        "metrics": run["metrics"], "scores": run["scores"]})

    def _webhook(self, run: dict, node: str, info: Any, path: list[str]) -> SendWebhook:
        effect_id = f"wh.{run['run_id']}.{node}"
        payload = {"run_id": run["run_id"], "node_id": node, "event": run["event"],
                   "workflow_id": run["workflow_id"], "version": run["version"],
                   "scores": run["scores"], "path": path}
        self._stage.outbox.append(
            (effect_id, "webhook", run["run_id"],
             orjson.dumps({"url": info.url, "secret_ref": info.secret_ref,
                           "payload": payload}).decode(), False))
        return SendWebhook(effect_id, info.url or "", info.secret_ref, payload)

    # ----------------------------------------------------------------- apps and timers
    def _app_completed(self, entry: Any, p: dict) -> list[Any]:
        run_id, node, result = p["run_id"], p["node_id"], p.get("result") or {}
        if not isinstance(result, dict):
            raise Rejected("result", "must be an object")
        task = self._task(run_id, node)
        if task is None:
            raise Rejected("node_id", f"run {run_id} has no app task at node {node}", 404)
        if task[2] == "review":  # an app answers its own node only; reviewers use the review API
            raise Rejected("node_id", f"node {node} is a review: only the review API decides it",
                           403)
        return self._complete_task(entry, task, result)

    def _review_decided(self, entry: Any, p: dict) -> list[Any]:
        """A reviewer's outcome, checked here (not only in the API) so that every replica
        accepts exactly the decisions of the user who holds the claim (or a manager's)."""
        run_id, node, user = p["run_id"], p["node_id"], p["user"]
        outcome, override = p["outcome"], bool(p.get("override"))
        task = self._task(run_id, node)
        if task is None or task[2] != "review":
            raise Rejected("run_id", f"no review task for run {run_id} at node {node}", 404)
        if task[STATUS] != "pending":
            raise Rejected("run_id", f"the review task is {task[STATUS]}", 409)
        holder = task[CLAIMED_BY]
        if holder != user and not override:
            raise Rejected("run_id", f"claimed by {holder}" if holder
                           else "not claimed: claim it first", 409)
        run = self._live_run(run_id)
        info = flows.outside(self._compiled(run["workflow_id"], run["version"]), node)
        allowed = list(info.outcomes) if info is not None else []
        if outcome not in allowed:
            raise Rejected("outcome", f"must be one of {allowed}")
        reason = p.get("reason")
        answer = {"outcome": outcome, "reviewer": user,
                  **({"reason": reason} if isinstance(reason, str) and reason else {})}
        return self._complete_task(entry, task, answer)

    def _complete_task(self, entry: Any, task: tuple, result: dict) -> list[Any]:
        run_id, node, status = task[0], task[1], task[STATUS]
        if status != "pending":  # a late answer after a timeout or a second answer: ignored
            run = self._stage.live.get(run_id) or self._live.get(run_id)
            if run is None:  # decided: its newest version is pending or in DuckDB (``_task``
                run = self._buffer.view(run_id)  # found the task, so the run is still held)
                if run is None:
                    run = self._load_run(run_id)
            return [Reply(ok=True, runs=[run], result={"ignored": status})]
        self._stage.timers.append((run_id, node, None))
        self._stage.tasks[(run_id, node)] = (*task[:STATUS], "done", *task[STATUS + 1:OUTCOME],
                                             orjson.dumps(result).decode())
        effects = self._resume(run_id, node, result, entry)
        return [Reply(ok=True, runs=[effects[0].run], result={"ignored": None}), *effects]

    def _task(self, run_id: str, node: str) -> tuple | None:
        """The app_tasks row of a task: a pending one from the hot state; a closed one (a late
        or second answer, a review already decided) or none (a run decided before the node,
        an unknown run) from the pending generations, else DuckDB. Never a flush: any client
        can send such an answer, and a flush per answer stalls apply for a generation."""
        key = (run_id, node)
        task = self._stage.tasks.get(key) or self._tasks.get(key)
        if task is not None:
            return task
        found, task = self._buffer.task(key)
        if found:
            return task
        return self.con.execute(f"SELECT {TASK_COLUMNS} FROM app_tasks "
                                "WHERE run_id = ? AND node_id = ?", [run_id, node]).fetchone()

    def _live_run(self, run_id: str) -> dict:
        """A run waiting for outside work, as this entry so far left it (read only)."""
        run = self._stage.live.get(run_id) or self._live.get(run_id)
        if run is None:
            raise Rejected("run_id", f"no run {run_id} waiting", 404)
        return run

    def _resume(self, run_id: str, node: str, result: dict, entry: Any) -> list[Any]:
        held = self._live_run(run_id)
        # A new version of the run: the held one is staged and may be read by other threads
        run = {**held, "apps": dict(held["apps"]), "scores": dict(held["scores"]),
               "path": list(held["path"])}
        compiled = self._compiled(run["workflow_id"], run["version"])
        run["apps"][node] = result
        info = flows.outside(compiled, node)
        if info is not None and info.kind == "score":
            run["scores"].update({name: float(result[name]) for name in info.scores
                                  if isinstance(result.get(name), int | float)})
        run["state"], run["updated_ts"], run["offset"] = "running", entry.ts, entry.offset
        run["waiting_for"] = None
        effects = self._walk(run, compiled, entry)
        self._save_run(run)
        out: list[Any] = [RunChanged(run)]
        if run["state"] == "decided":
            out.append(StoreRun(run))
        return out + effects

    def _tick(self, entry: Any, p: dict) -> list[Any]:
        due = self._due(entry.ts, expired_per_tick_max)
        effects: list[Any] = []
        for run_id, node in due:
            task = self._tasks[(run_id, node)]
            self._stage.timers.append((run_id, node, None))
            self._stage.tasks[(run_id, node)] = (*task[:STATUS], "expired", *task[STATUS + 1:])
            effects += self._resume(run_id, node, {"timed_out": True}, entry)
        self.finished.select(self._stage, entry.ts, self._seen)
        return [Reply(ok=True, result={"expired": len(due)}), *effects]

    def _due(self, ts: int, limit: int) -> list[tuple[str, str]]:
        """The pending tasks whose deadline is at or before ``ts``, by (deadline, run, node),
        at most ``limit``: the heap's smallest entries, read in order without changing it (a
        second heap of positions), skipping entries closed or moved since they were pushed."""
        heap, timers = self._timer_heap, self._timers
        due: list[tuple[str, str]] = []
        frontier = [(heap[0], 0)] if heap else []
        while frontier and len(due) < limit:
            (deadline, run_id, node), at = heapq.heappop(frontier)
            if deadline > ts:
                break
            key = (run_id, node)
            if timers.get(key) == deadline and key not in due[-1:]:  # duplicates are adjacent
                due.append(key)
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return due

    def _review_claimed(self, entry: Any, p: dict) -> list[Any]:
        """Claim a review task (for ``ttl_ms`` of log time, if given), or release it.

        While pending, the task's ``outcome`` holds the claim's times; a claim past its expiry
        may be taken over by anyone."""
        run_id, node, user = p["run_id"], p["node_id"], p["user"]
        task = self._task(run_id, node)
        if task is None or task[2] != "review":
            raise Rejected("run_id", "no review task for this run and node", 404)
        if task[STATUS] != "pending":
            raise Rejected("run_id", f"the review task is {task[STATUS]}", 409)
        holder = task[CLAIMED_BY]
        claim = orjson.loads(task[OUTCOME]) if task[OUTCOME] else {}
        expires = claim.get("claim_expires_ts")
        expired = expires is not None and entry.ts >= expires
        if holder not in (None, user) and not expired and not p.get("override"):
            raise Rejected("run_id", f"already claimed by {holder}", 409)
        if p.get("release"):
            self._stage.tasks[(run_id, node)] = (*task[:CLAIMED_BY], None, None)
            return [Reply(ok=True, result={"claimed_by": None})]
        ttl = p.get("ttl_ms")
        claim = ({"claimed_ts": entry.ts, "claim_expires_ts": entry.ts + int(ttl)}
                 if isinstance(ttl, int) and ttl > 0 else None)
        self._stage.tasks[(run_id, node)] = (
            *task[:CLAIMED_BY], user, None if claim is None else orjson.dumps(claim).decode())
        return [Reply(ok=True, result={"claimed_by": user})]

    def _effects_done(self, entry: Any, p: dict) -> list[Any]:
        """Marks runs stored. Each [run id, offset] is a version a StoreRun carried, so the
        run's offset_ is at least that offset (the flush relies on it to touch only recent
        rows); a confirmation naming a later offset than the run has may leave it unstored, and
        then the next leader stores it again (idempotent), on every replica alike. Then the
        finished runs past the run retention leave the hot state (``retention``)."""
        stage = self._stage
        for run_id, offset in p.get("stored", []):
            stage.stored[run_id] = max(int(offset), stage.stored.get(run_id, -1))
        stage.outbox_done.extend(str(e) for e in p.get("outbox", []))
        self.finished.select(stage, entry.ts, self._seen)
        return []

    def _leader_started(self, entry: Any, p: dict) -> list[Any]:
        """A new leader re-drives every effect not yet confirmed (all idempotent)."""
        effects: list[Any] = []
        for row in self.con.execute(f"SELECT {RUN_COLUMNS} FROM runs "
                                    "WHERE stored_offset < offset_ ORDER BY run_id").fetchall():
            run = run_dict(row)
            run["path"] = steps_of(self.con, run["run_id"])
            effects.append(StoreRun(run))
        for run_id, node in self.con.execute(
                "SELECT run_id, node_id FROM app_tasks WHERE status = 'pending' AND kind = 'app' "
                "ORDER BY run_id, node_id").fetchall():
            run = self._load_run(run_id)
            info = flows.outside(self._compiled(run["workflow_id"], run["version"]), node)
            effects.append(self._call_app_effect(run, node, info))
        for effect_id, payload in self.con.execute(
                "SELECT effect_id, payload FROM outbox WHERE NOT done ORDER BY effect_id"
                ).fetchall():
            body = orjson.loads(payload)
            effects.append(SendWebhook(effect_id, body["url"], body["secret_ref"],
                                       body["payload"]))
        return effects

    # ----------------------------------------------------------------- workflows and metrics
    def _known_metrics(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT name FROM metric_defs ORDER BY name")
                .fetchall()]

    def _draft_saved(self, entry: Any, p: dict) -> list[Any]:
        wf_id, definition = p["workflow_id"], p["definition"]
        if p.get("if_match") is not None:  # saved from an older read of the draft: refuse
            row = self.con.execute("SELECT definition FROM workflow_drafts WHERE workflow_id = ?",
                                   [wf_id]).fetchone()
            current = None if row is None else draft_etag(orjson.loads(row[0]))
            if current != p["if_match"]:
                raise Rejected("If-Match", "the draft changed since it was read; reload it "
                               f"(current ETag {current})", 409)
        problems = flows.validate(definition, self._known_metrics())
        self.con.execute("INSERT OR REPLACE INTO workflow_drafts VALUES (?, ?, ?, ?)",
                         [wf_id, orjson.dumps(definition).decode(), entry.ts, p.get("by")])
        return [Reply(ok=True, result={"workflow_id": wf_id, "problems": problems})]

    def _published(self, entry: Any, p: dict) -> list[Any]:
        wf_id = p["workflow_id"]
        definition = p.get("definition")
        if definition is None:
            row = self.con.execute("SELECT definition FROM workflow_drafts WHERE workflow_id = ?",
                                   [wf_id]).fetchone()
            if row is None:
                raise Rejected("workflow_id", f"workflow {wf_id} has no draft", 404)
            definition = orjson.loads(row[0])
        return self._publish(wf_id, definition, entry, p.get("by"))

    def _rolled_back(self, entry: Any, p: dict) -> list[Any]:
        wf_id, version = p["workflow_id"], int(p["version"])
        row = self.con.execute("SELECT definition FROM workflow_versions "
                               "WHERE workflow_id = ? AND version = ?", [wf_id, version]).fetchone()
        if row is None:
            raise Rejected("version", f"workflow {wf_id} has no version {version}", 404)
        return self._publish(wf_id, orjson.loads(row[0]), entry, p.get("by"))

    def _publish(self, wf_id: str, definition: dict, entry: Any, by: str | None) -> list[Any]:
        (latest,) = self.con.execute("SELECT coalesce(max(version), 0) FROM workflow_versions "
                                     "WHERE workflow_id = ?", [wf_id]).fetchone()
        version = latest + 1
        try:
            compiled = flows.compile(definition, version, self._known_metrics())
        except flows.Invalid as exc:
            raise Rejected("definition", "; ".join(exc.problems)) from exc
        etype = flows.event_type(compiled)
        self.con.execute("INSERT INTO workflow_versions VALUES (?, ?, ?, ?, ?, ?)",
                         [wf_id, version, etype, orjson.dumps(definition).decode(), entry.ts, by])
        self.con.execute("INSERT OR REPLACE INTO workflow_active VALUES (?, ?, ?)",
                         [wf_id, version, etype])
        self._active[wf_id] = (version, etype, compiled)  # last: nothing below can fail
        self._of_type.clear()
        return [Reply(ok=True, result={"workflow_id": wf_id, "version": version,
                                       "event_type": etype})]

    def _metric_defined(self, entry: Any, p: dict) -> list[Any]:
        text = p["text"]
        try:
            names = self.engine.define(text)
        except ValueError as exc:  # MetricSyntaxError is a ValueError
            raise Rejected("text", str(exc)) from exc
        for name in names:
            self.con.execute("INSERT OR REPLACE INTO metric_defs VALUES (?, ?, ?)",
                             [name, text, entry.ts])
        self._has_metrics = True
        return [Reply(ok=True, result={"names": list(names)})]

    def _metric_dropped(self, entry: Any, p: dict) -> list[Any]:
        name = p["name"]
        if self.con.execute("SELECT 1 FROM metric_defs WHERE name = ?", [name]).fetchone() is None:
            raise Rejected("name", f"no metric named {name}", 404)
        users = [w for w, (_, _, c) in sorted(self._active.items())
                 if name in flows.metrics_used(c)]
        if users:
            raise Rejected("name", f"metric {name} is used by workflows {users}", 409)
        self.engine.drop(name)
        self.con.execute("DELETE FROM metric_defs WHERE name = ?", [name])
        self._has_metrics = bool(self._known_metrics())
        return [Reply(ok=True, result={"dropped": name})]

    # ----------------------------------------------------------------- rows
    def _compiled(self, wf_id: str, version: int) -> Any:
        active = self._active.get(wf_id)
        if active is not None and active[0] == version:
            return active[2]
        row = self.con.execute("SELECT definition FROM workflow_versions "
                               "WHERE workflow_id = ? AND version = ?", [wf_id, version]).fetchone()
        if row is None:
            raise InvariantViolation(f"run of unknown workflow version {wf_id}@{version}")
        return flows.compile(orjson.loads(row[0]), version, None)

    def _rebuild_active(self) -> None:
        self._active = {}
        self._of_type.clear()
        for wf_id, version, etype, definition in self.con.execute(
                "SELECT a.workflow_id, a.version, a.event_type, v.definition "
                "FROM workflow_active a JOIN workflow_versions v USING (workflow_id, version) "
                "ORDER BY a.workflow_id").fetchall():
            self._active[wf_id] = (version, etype, flows.compile(orjson.loads(definition),
                                                                 version, None))

    def _save_run(self, run: dict) -> None:
        """Stage the run's row; the run itself is what readers of pending runs get."""
        self._stage.live[run["run_id"]] = run  # held while it waits (``_commit_stage``)
        self._stage.put_run(
            (run["run_id"], run["event_id"], run["event_type"], run["workflow_id"],
             run["version"], run["state"], run["node_id"], run["decision"], run["started_ts"],
             run["updated_ts"], run["offset"], run["stored_offset"],
             run["event"], run["metrics"], run["scores"], run["apps"],  # JSON when flushed
             run["waiting_for"]), run)

    def _load_run(self, run_id: str) -> dict:
        row = self.con.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?",
                               [run_id]).fetchone()
        if row is None:
            raise Rejected("run_id", f"no run {run_id}", 404)
        run = run_dict(row)
        run["path"] = steps_of(self.con, run_id)
        return run
