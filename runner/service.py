"""One runner node: wires the state machine, the log, the election, checkpoints, the run store
and the effect executor, and offers ``submit`` and run waiters to the HTTP API.

Callers build ``Service(settings)``, ``start()`` it (blocks until the state is restored and
the log is being consumed), and ``stop()`` it. A housekeeping thread on the leader appends
``Tick`` entries when an app task is due, ``EffectsDone`` entries for executed effects, and
preloads the demo workflow into an empty state.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import checkpoints
from replog.node import Node
from replog.protocols import Applied
from runner import demo
from runner.auth import AuthStore
from runner.errors import RequestInvalid
from runner.executor import EffectExecutor
from runner.forwarder import HttpForwarder, ReplayGuard
from runner.gilwatch import GilWatch
from runner.latency import LatencyRecorder
from runner.runstore import RunStore, open_run_store
from runner.settings import Settings
from runner.state import entries, queries
from runner.state.effects import Reply
from runner.state.machine import RunnerStateMachine
from runner.telemetry import Telemetry

log = logging.getLogger(__name__)

waiters_max = 100_000
# Past this many decided runs unconfirmed by the run store, /healthz names it as a problem
# (about a minute of orders at 300/s behind: more than the leader's retries explain).
runs_awaiting_store_warn = 20_000
housekeeper_join_timeout_s = 10.0  # at stop: a round waits at most for a failed submit


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Service:
    def __init__(self, settings: Settings, *, run_store: RunStore | None = None) -> None:
        self.settings = settings
        self.telemetry = Telemetry()
        settings.node_dir.mkdir(parents=True, exist_ok=True)
        self.auth = AuthStore(settings.data_dir / "auth.json", settings.token_secret,
                              settings.api_keys, settings.token_secrets_previous)
        self.replay_guard = ReplayGuard()  # nonces of forwarded requests already served
        self._run_store = run_store
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]] = {}
        self._waiters_lock = threading.Lock()
        self._running = False
        self._demo_checked = False
        self.app_urls = {"demo_score": f"{settings.url}/demo/score", **settings.app_urls}
        self.round_trip = LatencyRecorder()
        self.gil_watch = GilWatch(settings.gil_watch_ms / 1000) if settings.gil_watch_ms else None
        self.diverged: list[dict] = []  # checkpoint offsets where replicas disagreed

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        s = self.settings
        # The metrics engine's files are part of the state: rebuilt from a checkpoint + the log.
        shutil.rmtree(s.node_dir / "metrics", ignore_errors=True)
        self.sm = RunnerStateMachine(s.node_dir, dedup_retention_ms=s.dedup_retention_ms,
                                     run_retention_ms=s.run_retention_ms,
                                     flush_phase=s.effective_flush_phase,
                                     capture_wait_s=s.checkpoint_capture_wait_s)
        self.sm.rejections.listener = lambda r: self.telemetry.entries_rejected.labels(
            r.kind, r.reason).inc()
        store = checkpoints.store_from_url(s.effective_checkpoint_url)
        # Only manifests signed with the cluster's key are trusted: restoring reads engine
        # state that is not safe to load from anyone else.
        key = s.checkpoint_key()
        # The manifest's (writer id, seq) seeds the fence: entries of writers deposed before
        # the checkpoint, and duplicates of entries before it, stay ignored on replay.
        # The manifests the restore reads stay known to the checkpointer: its first delta on
        # the restored chain reads none of them again.
        known = checkpoints.KnownManifests.for_writer(s.checkpoint_full_every, s.checkpoint_retain)
        manifest = checkpoints.restore_newest(store, self.sm, key=key, known=known)
        start_offset = 0 if manifest is None else manifest.offset + 1
        start_writer_id = -1 if manifest is None else manifest.writer_id
        start_writer_seq = -1 if manifest is None else manifest.writer_seq
        self.checkpointer = checkpoints.Checkpointer(
            store, self.sm, s.checkpoint_every_entries, s.checkpoint_retain, node_id=s.node_id,
            key=key, on_mismatch=self._digest_mismatch, background_nice=s.checkpoint_nice,
            write_delay_s=s.checkpoint_write_delay(is_leader=False),
            full_every=s.checkpoint_full_every, known=known)
        if s.mode == "cluster":
            from replog.kafka import KafkaLog, retention_bytes_for
            from replog.zk import ZkElection

            self.log = KafkaLog(s.kafka_bootstrap, s.kafka_topic,
                                retention_bytes=retention_bytes_for(
                                    s.checkpoint_every_entries, s.checkpoint_retain,
                                    s.log_entry_bytes_max))
            election = ZkElection(s.zookeeper, s.election_path, s.session_timeout_s)
            # First guess of the leader's term: the newest writer the log holds.
            forwarder = HttpForwarder(s.cluster_secret, term_hint=lambda: self.node.writer_id)
        else:
            from replog.filelog import FileLog
            from replog.single import SingleNodeElection

            self.log = FileLog(s.data_dir / "log" / "railflow.log")
            election, forwarder = SingleNodeElection(_next_writer_epoch(s.data_dir / "log")), None
        append_thread = True if s.mode == "cluster" and s.kafka_append == "thread" else None
        self.run_store = self._run_store or open_run_store(s)
        self.executor = EffectExecutor(s, self.run_store, self._submit_raw,
                                       self._run_changed, self.telemetry, self.app_urls,
                                       s.webhook_secrets)
        self.node = Node(self.sm, self.log, election, node_id=s.node_id, advertise_url=s.url,
                         forwarder=forwarder, on_effects=self._on_effects,
                         start_offset=start_offset, start_writer_id=start_writer_id,
                         start_writer_seq=start_writer_seq, checkpointer=self.checkpointer,
                         append_thread=append_thread, on_role=self._role_changed)
        self.node.start()
        self._running = True
        self._housekeeper = threading.Thread(target=self._housekeeping, name="housekeeping",
                                             daemon=True)
        self._housekeeper.start()
        if self.gil_watch is not None:
            self.gil_watch.start()

    def stop(self) -> None:
        self._running = False
        if self.gil_watch is not None:
            self.gil_watch.stop()
        self.node.stop()  # fails what the housekeeper may wait for
        # The housekeeper opens DuckDB cursors on the state's connection: closing it while one
        # opens fails the close ("connection is busy with another call").
        housekeeper = getattr(self, "_housekeeper", None)
        if housekeeper is not None:
            housekeeper.join(timeout=housekeeper_join_timeout_s)
        self.executor.close()
        self.checkpointer.close(timeout_s=10)
        self.run_store.close()
        self.log.close()
        self.sm.close()

    @property
    def is_leader(self) -> bool:
        return self.node.is_leader

    def _digest_mismatch(self, offset: int, ours: str, theirs: Any) -> None:
        self.telemetry.digest_mismatches.inc()
        self.diverged.append({"offset": offset, "digest": ours, "other_digest": theirs.digest,
                              "other_node": theirs.writer_node})
        del self.diverged[:-100]  # the newest are enough to investigate

    def runs_awaiting_store(self) -> int:
        """Decided runs the run store has not confirmed: they stay in memory until it does."""
        return self.sm.finished.unstored

    def problems(self) -> list[str]:
        """The service's own troubles (the node's are in ``node.problems()``), for /healthz."""
        out = []
        if self.executor.store_error:
            out.append(f"run store write failing: {self.executor.store_error}")
        awaiting = self.runs_awaiting_store()
        if awaiting > runs_awaiting_store_warn:
            out.append(f"{awaiting} decided runs wait for the run store to confirm them "
                       "(held in memory until it does)")
        if self.diverged:
            out.append(f"digests differ at offsets {[d['offset'] for d in self.diverged[-5:]]}")
        return out

    def ready(self) -> bool:
        return self._running and self.node.failure is None and (
            self.node.is_leader or self.node.leader_url() is not None)

    # ---------------------------------------------------------------- submit and replies
    def _submit_raw(self, kind: str, payload: bytes, timeout_s: float) -> Future:
        """Submit through the node; on the leader, time the log round trip (append → applied)."""
        leader = self.node.is_leader
        started = time.perf_counter_ns()
        fut = self.node.submit(kind, payload, timeout_s)
        if leader:
            fut.add_done_callback(lambda f: self.round_trip.record(
                (time.perf_counter_ns() - started) // 1000) if not f.exception() else None)
        return fut

    async def submit(self, kind: str, payload: dict, timeout_s: float | None = None, *,
                     raw: bytes | None = None) -> Applied:
        """Append ``payload`` (``raw``: its encoding, when the caller has it) and wait until
        this node applied it."""
        raw = entries.encode(payload) if raw is None else raw
        self.check_entry_size(raw)
        # No concurrent Future between the node and this loop: the node's thread hands the
        # outcome to the loop's inbox, which wakes the loop once for all that arrive together.
        inbox = _inbox()
        waiter = inbox.loop.create_future()
        self._submit_to(kind, raw, timeout_s, _Reply(_settle_future, waiter, inbox,
                                                     self._timed()))
        return await waiter

    def submit_then(self, kind: str, raw: bytes, then: Callable[[Any, Any], None],
                    timeout_s: float | None = None) -> None:
        """Append ``raw`` (checked by ``check_entry_size``); once this node applied it, call
        ``then(applied, None)`` (or ``then(None, error)``) on the calling event loop, without a
        task or a future in between (``runner.api.transport``'s lean orders)."""
        self._submit_to(kind, raw, timeout_s, _Reply(then, None, _inbox(), self._timed()))

    def submit_direct(self, kind: str, raw: bytes, then: Callable[[Any, Any], None],
                      timeout_s: float | None = None) -> None:
        """Append ``raw`` (checked by ``check_entry_size``); ``then(applied, None)`` (or
        ``then(None, error)``) runs on the thread that settles it, no event loop in between:
        the node's apply loop for an entry this node applied, else the appender's, the
        election's, a forwarding thread, or the caller's own when it fails at once (the log
        refused its record, say). ``then``
        must be quick and must not block (``runner.api.native`` answers the request there);
        what it raises is logged."""
        self._submit_to(kind, raw, timeout_s, _Direct(then, self._timed()))

    def check_entry_size(self, raw: bytes) -> None:
        if len(raw) > self.settings.log_entry_bytes_max:  # the log's retention assumes it
            raise RequestInvalid("body", f"the request is {len(raw)} bytes as a log entry, over "
                                 f"{self.settings.log_entry_bytes_max}", 413)

    def _timed(self) -> LatencyRecorder | None:
        return self.round_trip if self.node.is_leader else None

    def _submit_to(self, kind: str, raw: bytes, timeout_s: float | None, reply: _Reply) -> None:
        self.node.submit_to(kind, raw, timeout_s or self.settings.submit_timeout_s, reply)

    @staticmethod
    def reply_of(applied: Applied) -> Reply:
        for effect in applied.effects:
            if isinstance(effect, Reply):
                return effect
        return Reply(ok=True)

    def reader(self) -> Any:
        return self.sm.reader()

    def wait_workflows(self, timeout_s: float, poll_s: float = 0.1) -> bool:
        """Wait until the state holds a published workflow (a new node's demo workflow is
        published through the log after ``start``); False if none within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            cur = self.reader()
            try:
                if queries.workflows(cur):
                    return True
            finally:
                cur.close()
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)

    # ---------------------------------------------------------------- run waiters
    def _on_effects(self, entry: Any, effects: list[Any]) -> None:
        term = self.node.my_writer_id
        self.executor.handle(entry, effects, term is not None and self.node.is_leader, term)

    def _run_changed(self, view: dict) -> None:
        # Without the lock first (nearly every run has no waiter): a waiter registered after
        # this test peeks the state, which apply updated before this call.
        if view["run_id"] not in self._waiters:
            return
        with self._waiters_lock:
            waiters = self._waiters.pop(view["run_id"], [])
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_set_if_pending, fut, view)

    async def wait_runs(self, runs: list[dict], deadline_at_ms: int) -> list[dict]:
        """Wait until each run no longer waits on an app (a review does not count), or the
        deadline; return the latest known view of each run."""
        out = []
        for view in runs:  # a run decided at once (the common case) needs no loop
            while not _settled(view):
                remaining_ms = deadline_at_ms - now_ms()
                if remaining_ms <= 0:
                    break
                loop = _running_loop()
                fut = loop.create_future()
                with self._waiters_lock:
                    if len(self._waiters) >= waiters_max:
                        break
                    self._waiters.setdefault(view["run_id"], []).append((loop, fut))
                latest = self.sm.peek_run(view["run_id"])
                if latest is None:
                    cur = self.reader()
                    try:
                        latest = queries.run(cur, view["run_id"])
                    finally:
                        cur.close()
                if latest is not None and latest["offset"] > view["offset"]:
                    view = latest
                    continue
                try:
                    view = await asyncio.wait_for(fut, remaining_ms / 1000)
                except TimeoutError:
                    break
            out.append(view)
        return out

    # ---------------------------------------------------------------- housekeeping
    def _housekeeping(self) -> None:
        s = self.settings
        interval_s = min(s.tick_interval_ms, s.effects_confirm_interval_ms) / 1000
        last_tick = 0
        while self._running:
            time.sleep(interval_s)
            try:
                self.telemetry.applied_offset.set(self.node.applied_offset)
                self.telemetry.is_leader.set(1 if self.node.is_leader else 0)
                self.telemetry.store_backlog.set(self.executor.store_backlog())
                self.telemetry.runs_awaiting_store.set(self.runs_awaiting_store())
                if not self.node.is_leader:
                    continue
                confirmations = self.executor.take_confirmations()
                if confirmations:
                    self.node.submit(entries.EFFECTS_DONE, entries.encode(confirmations),
                                     s.submit_timeout_s)
                if now_ms() - last_tick >= s.tick_interval_ms:
                    last_tick = now_ms()
                    self._tick_if_due()
                if s.demo and not self._demo_checked:
                    self._demo_checked = demo.preload(self)
            except Exception:  # noqa: BLE001 - keep the housekeeper alive; the next round retries
                log.exception("housekeeping round failed")

    def _role_changed(self, leading: bool) -> None:
        """Called by the node where its role changes. The checkpoint's thread reads the delay
        after each capture: the leader writes last."""
        self.checkpointer.write_delay_s = self.settings.checkpoint_write_delay(leading)

    def _tick_if_due(self) -> None:
        due = self.sm.next_deadline()
        if due is not None and due <= now_ms():
            self.node.submit(entries.TICK, entries.encode({}),
                             self.settings.submit_timeout_s).result()


def _next_writer_epoch(log_dir) -> int:
    """A writer id larger than any earlier run of this embedded node used: the log fences a
    reused id's entries as duplicates."""
    path = log_dir / "writer-epoch"
    epoch = int(path.read_text()) + 1 if path.exists() else 1
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(epoch))
    tmp.replace(path)
    return epoch


def _settled(view: dict) -> bool:
    return view["state"] == "decided" or view.get("waiting_for") == "review"


_loops = threading.local()


def _running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()`` without its ``getpid`` syscall (Python 3.11 checks the
    pid on every call, a few % of the HTTP thread): the loop this thread last found running,
    while it still runs. A thread runs one loop at a time, so that is the running one, unless
    a loop was stopped here and restarted on another thread while this one runs another (no
    server does that) or the process forked inside the loop (a node never does)."""
    loop = getattr(_loops, "loop", None)
    if loop is None or not loop.is_running():
        loop = _loops.loop = asyncio.get_running_loop()
    return loop


class _Reply:
    """A request's ``replog.node.Sink``: ``then(arg, result, error)`` runs on the request's
    loop (on the leader, the log round trip, append to applied, is timed too)."""

    __slots__ = ("then", "arg", "inbox", "timed", "started")

    def __init__(self, then: Callable, arg: Any, inbox: _Inbox,
                 timed: LatencyRecorder | None) -> None:
        self.then = then
        self.arg = arg
        self.inbox = inbox
        self.timed = timed
        self.started = time.perf_counter_ns() if timed is not None else 0

    def set_result(self, result: Applied) -> None:
        if self.timed is not None:
            self.timed.record((time.perf_counter_ns() - self.started) // 1000)
        self.inbox.put(self, result, None)

    def set_exception(self, exception: BaseException) -> None:
        self.inbox.put(self, None, exception)

    def settle(self, result: Any, error: BaseException | None) -> None:
        if self.arg is None:
            self.then(result, error)
        else:
            self.then(self.arg, result, error)


class _Direct:
    """A request's ``replog.node.Sink`` calling ``then(result, error)`` on the thread that
    settles it (on the leader, the log round trip is timed as ``_Reply`` times it)."""

    __slots__ = ("then", "timed", "started")

    def __init__(self, then: Callable[[Any, Any], None], timed: LatencyRecorder | None) -> None:
        self.then = then
        self.timed = timed
        self.started = time.perf_counter_ns() if timed is not None else 0

    def set_result(self, result: Applied) -> None:
        if self.timed is not None:
            self.timed.record((time.perf_counter_ns() - self.started) // 1000)
        self._call(result, None)

    def set_exception(self, exception: BaseException) -> None:
        self._call(None, exception)

    def _call(self, result: Any, error: BaseException | None) -> None:
        try:
            self.then(result, error)
        except Exception:  # noqa: BLE001 - the settling thread (the apply loop) carries on
            log.exception("settling a request failed")


def _settle_future(waiter: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if waiter.done():  # the request went away (cancelled)
        return
    if error is None:
        waiter.set_result(result)
    else:
        waiter.set_exception(error)


class _Inbox:
    """Outcomes on their way to one event loop. ``call_soon_threadsafe`` writes to the loop's
    self-pipe each time (a syscall and a wakeup); outcomes that arrive before the loop took the
    earlier ones ride with them."""

    __slots__ = ("loop", "_items", "_lock", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: list[tuple[_Reply, Any, BaseException | None]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, reply: _Reply, result: Any, error: BaseException | None) -> None:
        with self._lock:
            self._items.append((reply, result, error))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop closed: nobody waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for reply, result, error in items:
            try:
                reply.settle(result, error)
            except Exception:  # noqa: BLE001 - one request's failure must not lose the others
                log.exception("settling a request failed")


def _inbox() -> _Inbox:
    """The running loop's inbox (found as ``_running_loop`` finds the loop)."""
    inbox = getattr(_loops, "inbox", None)
    if inbox is None or not inbox.loop.is_running():
        inbox = _loops.inbox = _Inbox(_running_loop())
    return inbox


def _set_if_pending(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)
