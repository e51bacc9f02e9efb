"""Rows written by apply but not yet in DuckDB, flushed in bulk through Arrow off the apply thread.

One small DuckDB statement costs 0.1-3 ms (far more on a loaded machine); several per order is
too slow for the hot path, and even one bulk flush per few hundred orders would stall apply for
tens of milliseconds. So apply only appends rows to the current *generation* (each entry's
rows are staged apart and absorbed once it applied, so a rejected entry leaves none); a full
generation is handed to a flusher thread that inserts it (one statement per table, in
generation order so a later version of a run always wins). The buffer is part of the logical
state: before any query of these tables or digest, the apply thread calls ``flush()``, which
waits for every generation to land. A snapshot does not wait: ``when_landed`` queues its
capture behind the generations, and the flusher opens the view once they are in (a flush on
the apply thread paused every order for 100-250 ms at each checkpoint). API readers on other
threads look into the generations (under the lock) before DuckDB, so an applied run is always
visible.
"""

from __future__ import annotations

import array
import itertools
import logging
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from runner.errors import InvariantViolation
from runner.state import changes, schema

log = logging.getLogger(__name__)

# Log entries per generation: a generation goes to the flusher once the log offset enters the
# next span of this many entries (shifted by the buffer's phase). Each generation costs a
# transaction and one statement per table, a few ms each whatever the rows (the runs table's
# primary key, the commit), so generations are large: at 4,096 rows (~800 W3 orders) that fixed
# part was about a third of the flusher's CPU per order; 3,072 entries are ~16,000 rows of W3
# orders (~5.3 rows an order, one entry each). Nothing waits for a full generation: readers
# look into the pending ones, and those that query DuckDB for the newest rows call ``sync``.
# Spans are of the log's offsets, not of rows counted since the node started, so that a phase
# stays put across restarts, checkpoints and readers' syncs: replicas given different phases
# flush at different moments (a flush is ~70 ms of CPU at 1,000 orders/s; three replicas
# flushing at once on two shared cores held up the leader's orders for tens of ms).
handoff_entries = 3_072
# ... or once it holds this many rows (entries far larger than orders').
handoff_rows_max = 32_768
# ... or once it holds this much log time (entry ts, never a clock: the same on every replica),
# so that at low rates DuckDB lags the applied state by seconds, not by 3,072 entries. Not
# shorter: a generation's fixed cost (~15-20 ms) over the few orders a low rate brings in a
# few seconds is tens of µs per order (at 500 W3 orders/s the size bound comes first, ~6 s).
handoff_log_ms_max = 30_000
# The flusher converts a generation to Arrow a slice of rows at a time (a few hundred µs of
# the GIL each), giving the GIL away for ``pause_s`` once it held it ``hold_s`` (``Pacer``).
slice_rows = 256
hold_s = 0.0005
pause_s = 0.00005
generations_in_flight_max = 16  # back-pressure: apply waits beyond this (~262,000 rows)
_HELD = object()  # queued when a capture's work is held for the next hand-off (``when_landed``)

RUN_FIELDS = ("run_id", "event_id", "event_type", "workflow_id", "version", "state", "node_id",
              "decision", "started_ts", "updated_ts", "offset_", "stored_offset", "event",
              "metrics", "scores", "apps", "waiting_for")
STEP_FIELDS = ("run_id", "seq", "node_id", "node_kind", "edge_id", "next_node_id", "trace", "ts")
# Columns apply stages as the run's own dicts (never changed once staged: a later version of a
# run is a new row of new dicts) and the flusher writes as JSON text, off the apply thread; a
# step's trace is staged as its JSON already (bytes: ``runner.state.steps``), which the flusher
# copies into Arrow's text as it is.
RUN_JSON_COLUMNS = tuple(RUN_FIELDS.index(f) for f in ("event", "metrics", "scores", "apps"))
STEP_JSON_COLUMNS = (STEP_FIELDS.index("trace"),)
SEEN_FIELDS = ("event_id", "event_type", "offset_", "ts")
DECISION_FIELDS = ("run_id", "decision", "ts", "offset_")
TASK_FIELDS = ("run_id", "node_id", "kind", "queue", "status", "deadline_ts", "created_ts",
               "claimed_by", "outcome")
OUTBOX_FIELDS = ("effect_id", "kind", "run_id", "payload", "done")


@dataclass(eq=False)  # compared by identity: generations are queued and removed as objects
class _Generation:
    runs: dict[str, tuple] = field(default_factory=dict)
    views: dict[str, dict] = field(default_factory=dict)  # run id -> the run, as apply left it
    event_runs: dict[str, list[str]] = field(default_factory=dict)
    steps: list[tuple] = field(default_factory=list)
    seen: dict[str, tuple] = field(default_factory=dict)  # event id -> events_seen row
    seen_expired: list[str] = field(default_factory=list)  # ids past the dedup retention
    decisions: dict[str, tuple] = field(default_factory=dict)
    # app_tasks rows (INSERT OR REPLACE) by (run id, node id): the latest wins, since one
    # statement may not replace the same row twice (a task opened and closed in one generation)
    tasks: dict[tuple[str, str], tuple] = field(default_factory=dict)
    outbox: list[tuple] = field(default_factory=list)  # outbox rows (INSERT OR IGNORE)
    stored: dict[str, int] = field(default_factory=dict)  # run id -> offset confirmed stored
    outbox_done: list[str] = field(default_factory=list)
    # (run id, node id, deadline or None when the task closed): kept by the state machine,
    # never written to DuckDB (app_tasks holds the same facts)
    timers: list[tuple[str, str, int | None]] = field(default_factory=list)
    # Runs leaving the hot state (run id, decided offset, decided ts), deleted after this
    # generation's inserts; ``finished`` is the state machine's own
    # bookkeeping of retention (runner.state.retention), never written to DuckDB.
    runs_evicted: list[tuple[str, int, int]] = field(default_factory=list)
    evicted_ids: set[str] = field(default_factory=set)  # the run ids of ``runs_evicted``
    finished: list[tuple[int, int, str, str]] = field(default_factory=list)
    # Stage only: the run dicts an entry left (run id -> run), which the state machine keeps
    # while they wait for an app or a reviewer (its hot state of live runs); never written.
    live: dict[str, dict] = field(default_factory=dict)
    # The runs whose row here may replace one an earlier generation wrote: a
    # run a later entry resumed. An event's runs are new (a run id holds the entry's offset),
    # and a plain INSERT, cheaper per row, writes them; only these go by INSERT OR REPLACE.
    replaced: set[str] = field(default_factory=set)

    def rows(self) -> int:
        return (len(self.runs) + len(self.steps) + len(self.seen) + len(self.seen_expired)
                + len(self.tasks) + len(self.runs_evicted)
                + len(self.outbox) + len(self.stored) + len(self.outbox_done))

    def put_run(self, row: tuple, view: dict) -> None:
        """Stage-only (no lock): the latest row of a run, and the run (what readers get)."""
        self.runs[row[0]] = row
        self.views[row[0]] = view

    def reset(self) -> None:
        """Empty every container in place. The apply thread reuses one stage for every entry:
        building a fresh one allocated 17 containers per entry, and with them young
        collections. ``RowBuffer.absorb`` copies what it keeps, so nothing else holds them
        (and nothing replaces them: the list of them is taken once)."""
        containers = self.__dict__.get("_containers")
        if containers is None:
            containers = self.__dict__["_containers"] = [getattr(self, n) for n in _CONTAINERS]
        for container in filter(None, containers):  # the few this entry filled
            container.clear()


_CONTAINERS = tuple(_Generation.__dataclass_fields__)
Stage = _Generation  # the rows one entry adds, merged by ``RowBuffer.absorb`` once it applied


class _Marker:
    """Work queued behind the generations: the flusher runs it once they are in DuckDB."""

    __slots__ = ("work", "result")

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.result: Future[Any] = Future()

    def run(self) -> None:
        try:
            self.result.set_result(self.work())
        except BaseException as exc:  # noqa: BLE001 - the waiter gets it
            self.result.set_exception(exc)

    def fail(self, why: str) -> None:
        if not self.result.done():
            self.result.set_exception(InvariantViolation(why))


class RowBuffer:
    """``phase`` (0 to 1): where in each span of ``handoff_entries`` offsets this buffer hands
    its generations off (any phase gives the same state; only when the flusher works moves)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, phase: float = 0.0,
                 capture_wait_s: float = 0.0) -> None:
        if not 0.0 <= phase < 1.0:
            raise ValueError(f"phase must be in [0, 1), got {phase}")
        if capture_wait_s < 0:
            raise ValueError(f"capture_wait_s must be >= 0, got {capture_wait_s}")
        self._lock = threading.Lock()
        self._landed = threading.Condition(self._lock)
        self.current = _Generation()
        self._current_since: int | None = None  # log time of the current generation's start
        self._phase_entries = int(phase * handoff_entries)
        self._current_span: int | None = None  # the span of offsets the generation started in
        self._in_flight: list[_Generation] = []  # oldest first
        self._queue: queue.Queue[_Generation | _Marker | None] = queue.Queue()
        self._markers: deque[Future[Any]] = deque()  # queued by apply, maybe not yet run
        # A capture's generation and works held back until the next hand-off, or until the
        # flusher waited ``capture_wait_s`` for one (``when_landed(held=True)``)
        self._capture_wait_s = capture_wait_s
        self._held: list[_Generation | _Marker] = []
        self._cursor = con.cursor()
        self.failure: BaseException | None = None
        # pyarrow's first conversion imports pandas (~0.5 s holding the GIL): now, at the
        # node's start, not in its first flush while orders arrive
        pa.array([""], type=pa.string())
        # The keys of the rows written since the last capture (``runner.state.changes``):
        # the flusher's own, added as it writes each generation, cut by a ``when_landed`` work
        self._changes: changes.Changes | None = changes.Changes(since=None)
        self._thread = threading.Thread(target=self._flusher, name="duckdb-flush", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- apply thread
    def absorb(self, stage: Stage, runs_are_new: bool = False) -> None:
        """Add the rows of one applied entry (built apart, so a rejected entry adds none);
        ``runs_are_new``: its run rows and decisions are of runs no earlier entry staged.
        Under the lock: a reader's ``sync`` hands off whole entries only."""
        with self._lock:  # most of a stage is empty: only what it holds is touched
            gen = self.current
            if stage.runs:
                views = stage.views
                for run_id, row in stage.runs.items():
                    if run_id not in gen.runs:
                        if runs_are_new:  # all the runs of an event, in one generation
                            gen.event_runs.setdefault(row[1], []).append(run_id)
                        else:  # written by an earlier generation
                            gen.replaced.add(run_id)
                    gen.runs[run_id] = row
                    gen.views[run_id] = views[run_id]
            if stage.steps:
                gen.steps += stage.steps
            for event_id in stage.seen_expired:  # deleted before the inserts, so an id seen
                if gen.seen.pop(event_id, None) is None:  # again after expiring is kept
                    gen.seen_expired.append(event_id)
            if stage.seen:
                gen.seen.update(stage.seen)
            if stage.decisions:
                gen.decisions.update(stage.decisions)
            if stage.tasks:
                gen.tasks.update(stage.tasks)
            if stage.outbox:
                gen.outbox += stage.outbox
            for run_id, offset in stage.stored.items():
                gen.stored[run_id] = max(offset, gen.stored.get(run_id, -1))
            if stage.outbox_done:
                gen.outbox_done += stage.outbox_done
            if stage.runs_evicted:
                gen.runs_evicted += stage.runs_evicted
                gen.evicted_ids.update(run_id for run_id, _, _ in stage.runs_evicted)

    def maybe_hand_off(self, ts: int, offset: int) -> None:
        """After the entry at ``offset``, of log time ``ts``, was absorbed: hand the generation
        to the flusher once the offsets enter a new span, or it is large or old enough."""
        rows = self.current.rows()
        if not rows:  # a generation starts with its first rows
            return
        span = (offset + self._phase_entries) // handoff_entries
        since, started = self._current_since, self._current_span  # a reader's sync may reset
        if since is None or started is None:  # them meanwhile: read them once
            since, started = self._current_since, self._current_span = ts, span
        if span != started or rows >= handoff_rows_max or ts - since >= handoff_log_ms_max:
            with self._landed:
                while len(self._in_flight) >= generations_in_flight_max and self.failure is None:
                    self._landed.wait(0.5)  # back-pressure on apply only, never on readers
                self._hand_off_locked()

    def flush(self) -> None:
        """Wait until every row absorbed so far is in DuckDB (apply thread: all of them), and
        every ``when_landed`` work queued before ran: apply may write DuckDB itself next, and
        a snapshot's view must not see that."""
        self.sync()
        while self._markers:
            futures.wait([self._markers.popleft()])

    def when_landed(self, work: Callable[[], Any], held: bool = False) -> Future[Any]:
        """Run ``work`` on the flusher thread once every row absorbed so far is in DuckDB and
        before any row absorbed later is (apply thread; returns at once). Its result, or its
        error, or the flush's failure, comes through the future. ``held`` (a checkpoint's
        capture): the current generation and ``work`` wait for the buffer's next hand-off, at
        its own phase, or at most ``capture_wait_s`` of the flusher's time, instead of making
        one now: replicas capture at the same offset, and a hand-off there made all of them
        flush together. Readers find the held rows as they find any pending ones."""
        marker = _Marker(work)
        with self._landed:
            if self.failure is not None:
                marker.fail(f"flushing to DuckDB failed: {self.failure}")
                return marker.result
            if held and self._capture_wait_s > 0:
                self._hold_locked(marker)
            else:
                self._hand_off_locked()
                self._queue.put(marker)
        self._markers.append(marker.result)
        return marker.result

    def cut_changes(self, offset: int, held: bool = False) -> Future[changes.Changes | None]:
        """The keys of the rows written since the previous cut (None when unknown), once
        every row absorbed so far is in DuckDB; a new set starts then, relative to
        ``offset``. Apply thread, right after ``when_landed`` of a capture's view: the set
        holds exactly the entries that view holds since the cut before (the flusher runs the
        two works one after the other, between the same generations; ``held`` as the view's)."""
        def cut() -> changes.Changes | None:
            done, self._changes = self._changes, changes.Changes(since=offset)
            return done if done is not None and done.since is not None else None
        return self.when_landed(cut, held)

    def reset_changes(self, since: int | None) -> None:
        """Start the set afresh, relative to ``since`` (a restore's offset; apply thread);
        returns once the flusher did."""
        def reset() -> None:
            self._changes = changes.Changes(since=since)
        self.when_landed(reset).result()

    # ---------------------------------------------------------------- any thread
    def sync(self) -> None:
        """Make every entry absorbed so far visible in DuckDB, then return. Readers that query
        DuckDB for rows apply just wrote (a review task, the next deadline) call this instead
        of polling: it hands off the current generation (whole entries only) and waits."""
        with self._landed:
            self._hand_off_locked()
            last = self._in_flight[-1] if self._in_flight else None
            while last is not None and self.failure is None and \
                    any(g is last for g in self._in_flight):
                self._landed.wait(0.5)
        if self.failure is not None:
            raise InvariantViolation(f"flushing to DuckDB failed: {self.failure}")

    def close(self) -> None:
        with self._landed:
            self._release_held_locked()
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._cursor.close()
        self._fail_markers("the row buffer is closed")

    def _fail_markers(self, why: str) -> None:
        """Fail the work still queued or held (its generations will never land)."""
        held, self._held = self._held, []
        for item in held:
            if isinstance(item, _Marker):
                item.fail(why)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Marker):
                item.fail(why)

    def _hand_off_locked(self) -> None:
        """Queue the current generation (caller holds the lock, so generations stay in order),
        after whatever a capture held."""
        self._release_held_locked()
        gen = self.current
        if not gen.rows() and not gen.decisions:
            return
        self.current = _Generation()
        self._current_since = self._current_span = None
        self._in_flight.append(gen)
        self._queue.put(gen)

    def _hold_locked(self, marker: _Marker) -> None:
        """Hold the current generation (pending for readers, not queued) and ``marker`` behind
        it; the flusher is told, so that it stops waiting for a hand-off after
        ``capture_wait_s``."""
        gen = self.current
        first = not self._held
        if gen.rows() or gen.decisions:
            self.current = _Generation()
            self._current_since = self._current_span = None
            self._in_flight.append(gen)
            self._held.append(gen)
        self._held.append(marker)
        if first:
            self._queue.put(_HELD)  # type: ignore[arg-type]

    def _release_held_locked(self) -> None:
        """Queue what a capture held, in order (caller holds the lock)."""
        if not self._held:
            return
        for item in self._held:
            self._queue.put(item)
        self._held = []
        self._landed.notify_all()  # a flusher waiting on the hold queues them

    # ---------------------------------------------------------------- readers
    def pending(self) -> tuple[dict[str, tuple], list[tuple]]:
        """Run rows (latest per run) and step rows applied but not yet in DuckDB, for readers
        that scan (the console's run listing, hits and backtest). Their JSON columns (a run's
        event, metrics, scores and apps; a step's trace) may be the staged dicts, not text."""
        with self._lock:
            gens = [*self._in_flight, self.current]  # oldest first: a later row wins
            runs = {run_id: row for g in gens for run_id, row in g.runs.items()}
            return runs, [step for g in gens for step in g.steps]

    def view(self, run_id: str) -> dict | None:
        with self._lock:
            for gen in (self.current, *reversed(self._in_flight)):
                found = gen.views.get(run_id)
                if found is not None:
                    return found
        return None

    def task(self, key: tuple[str, str]) -> tuple[bool, tuple | None]:
        """``(True, row)`` if the pending generations decide the app_tasks row of ``key`` (its
        newest row, or None once its run left), else ``(False, None)``: then DuckDB holds the
        answer, even if a generation lands meanwhile (it holds nothing of ``key``)."""
        run_id = key[0]
        with self._lock:
            for gen in (self.current, *reversed(self._in_flight)):  # newest first
                if run_id in gen.evicted_ids:  # deleted after the generation's inserts
                    return True, None
                row = gen.tasks.get(key)
                if row is not None:
                    return True, row
        return False, None

    def views_of_event(self, event_id: str) -> list[dict] | None:
        """The newest views of an event's runs while the generation of the event is pending
        (a run resumed since has a newer view in a later generation)."""
        with self._lock:
            gens = (self.current, *reversed(self._in_flight))  # newest first
            for at, gen in enumerate(gens):
                ids = gen.event_runs.get(event_id)
                if ids is not None:
                    return [next(g.views[r] for g in gens[:at + 1] if r in g.views)
                            for r in sorted(ids)]
        return None

    # ---------------------------------------------------------------- flusher thread
    def _flusher(self) -> None:
        while True:
            gen = self._queue.get()
            if gen is None:
                return
            if gen is _HELD:  # whatever comes next hands them off, or the wait runs out
                with self._landed:
                    self._landed.wait_for(lambda: not self._held, self._capture_wait_s)
                    self._release_held_locked()
                continue
            if isinstance(gen, _Marker):
                gen.run()
                continue
            try:
                _write(self._cursor, gen)
            except BaseException as exc:  # noqa: BLE001 - surfaced on the apply thread
                log.exception("DuckDB flush failed")
                with self._landed:
                    self.failure = exc
                    self._fail_markers(f"flushing to DuckDB failed: {exc}")
                    self._landed.notify_all()
                return
            if self._changes is not None and not changes.absorb(self._changes, gen):
                self._changes = None  # too many to be worth a delta: the next one is full
            with self._landed:  # only now may readers stop finding the rows here
                self._in_flight = [g for g in self._in_flight if g is not gen]
                self._landed.notify_all()


def _write(cur: duckdb.DuckDBPyConnection, gen: _Generation) -> None:
    pacer = Pacer()
    cur.execute("BEGIN TRANSACTION")
    try:
        if gen.seen_expired:
            _register(cur, ("event_id",), [(e,) for e in gen.seen_expired])
            cur.execute("DELETE FROM events_seen WHERE event_id IN (SELECT event_id FROM _rows)")
            cur.unregister("_rows")
        _insert(cur, "events_seen", SEEN_FIELDS, list(gen.seen.values()), "INSERT", (), pacer)
        for verb, runs in _by_verb(gen):
            _insert(cur, "runs", RUN_FIELDS, runs, verb, RUN_JSON_COLUMNS, pacer)
        # A run is decided by one entry only (a decided run is never resumed): always new
        _insert(cur, "decisions", DECISION_FIELDS, list(gen.decisions.values()), "INSERT", (),
                pacer)
        _insert(cur, "steps", STEP_FIELDS, gen.steps, "INSERT", STEP_JSON_COLUMNS, pacer)
        for verb, tasks in _tasks_by_verb(gen):
            _insert(cur, "app_tasks", TASK_FIELDS, tasks, verb, (), pacer)
        _insert(cur, "outbox", OUTBOX_FIELDS, gen.outbox, "INSERT OR IGNORE", (), pacer)
        if gen.stored:
            # A confirmation names the offset of a version apply wrote, so the run's offset_ is
            # at least that: the bound on offset_ lets DuckDB's zone maps skip every row group
            # of older runs, and the join touches about the batch instead of the whole table.
            _register(cur, ("run_id", "stored"), list(gen.stored.items()))
            # Never past the row's own version: the digest kept by apply assumes it.
            cur.execute("UPDATE runs SET stored_offset = greatest(runs.stored_offset, "
                        "least(s.stored, runs.offset_)) "
                        "FROM _rows s WHERE runs.run_id = s.run_id AND runs.offset_ >= ?",
                        [min(gen.stored.values())])
            cur.unregister("_rows")
        if gen.outbox_done:
            # Only pending rows are ever read (a new leader sends them again): a sent one goes,
            # whether or not its run is still held.
            _register(cur, ("effect_id",), [(e,) for e in gen.outbox_done])
            cur.execute("DELETE FROM outbox WHERE effect_id IN (SELECT effect_id FROM _rows)")
            cur.unregister("_rows")
        if gen.runs_evicted:
            _evict(cur, gen.runs_evicted)
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise


def _by_verb(gen: _Generation) -> list[tuple[str, list[tuple]]]:
    """The run rows to write, split into new ones (a plain INSERT) and those of resumed runs
    (INSERT OR REPLACE); the two sets of run ids are disjoint."""
    replaced = gen.replaced
    if not replaced:
        return [("INSERT", list(gen.runs.values()))]
    return [(verb, [row for run_id, row in gen.runs.items() if (run_id in replaced) is again])
            for verb, again in (("INSERT", False), ("INSERT OR REPLACE", True))]


def _tasks_by_verb(gen: _Generation) -> list[tuple[str, list[tuple]]]:
    """The app_tasks rows to write: those of runs this generation started (their first run
    row is here: no earlier generation wrote a row of theirs) by a plain INSERT, the rest (a
    task claimed, answered or timed out, or opened by a resumed run) by INSERT OR REPLACE.
    An upsert cost the flush ~3 ms whatever its rows, and nearly every generation holds a few
    tasks just opened (orders sent to review)."""
    if not gen.tasks:
        return []
    runs, replaced = gen.runs, gen.replaced
    new: list[tuple] = []
    again: list[tuple] = []
    for (run_id, _), row in gen.tasks.items():
        (new if run_id in runs and run_id not in replaced else again).append(row)
    return [("INSERT", new), ("INSERT OR REPLACE", again)]


def _evict(cur: duckdb.DuckDBPyConnection, runs: list[tuple[str, int, int]]) -> None:
    """Delete the rows of runs that left the hot state. Last in the generation: no later row
    of a decided run follows its eviction. Every row of such a run was written at or before
    the entry that decided it, so the bounds on offsets and times let DuckDB's zone maps skip
    the row groups of newer runs."""
    _register(cur, ("run_id",), [(r,) for r, _, _ in runs])
    offset_max = max(o for _, o, _ in runs)
    ts_max = max(t for _, _, t in runs)
    try:
        for table, bound, value in (("runs", "offset_", offset_max),
                                    ("steps", "ts", ts_max),
                                    ("decisions", "offset_", offset_max),
                                    ("app_tasks", "created_ts", ts_max)):
            cur.execute(f"DELETE FROM {table} WHERE {bound} <= ? "
                        "AND run_id IN (SELECT run_id FROM _rows)", [value])
    finally:
        cur.unregister("_rows")


class Pacer:
    """Gives the GIL away once the flusher held it ``hold_s`` (wall time: a thread descheduled
    while it holds the GIL holds it too). A generation's conversion to Arrow is ~10-30 ms of
    Python and pyarrow calls that keep the GIL; a thread of the node wanting it meanwhile (the
    HTTP front, the apply loop) waited for the switch interval (5 ms) each time, or for a whole
    pyarrow call. A short sleep, not ``sleep(0)``: a thread that releases the GIL and asks for
    it at once may get it back before a waiting thread woke (``docs/latency.md``)."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= hold_s:
            time.sleep(pause_s)
            self._since = time.perf_counter()


def _json_column(values: tuple) -> pa.Array:
    """A column of JSON documents as text. Staged JSON bytes (orjson's: valid UTF-8) become
    the array's data as they are, in one copy, their lengths its offsets (``pa.array`` of
    bytes checks each value on a slow path, 8x slower than of text). Otherwise (dicts, text)
    in one comprehension: a Python call per value around orjson's was a third of the flusher's
    Python time."""
    try:
        data = b"".join(values)
    except TypeError:  # not all bytes
        data = None
    if data is not None and len(data) < 1 << 31:  # Arrow's string offsets are 32 bits
        offsets = array.array("i", itertools.accumulate(map(len, values), initial=0))
        return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets),
                                           pa.py_buffer(data))
    dumps = orjson.dumps
    return pa.array([v if v.__class__ is str else v.decode() if v.__class__ is bytes
                     else dumps(v).decode() for v in values], type=pa.string())


_ARROW_OF_SQL = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
                 "BOOLEAN": pa.bool_()}


def arrow_types(table: str, fields: tuple[str, ...]) -> tuple[pa.DataType, ...]:
    """The Arrow type of each of ``fields`` as ``runner.state.schema`` declares its column."""
    declared = dict(re.findall(r"(\w+) (VARCHAR|BIGINT|INTEGER|BOOLEAN)\b",
                               schema.TABLES[table][0]))
    return tuple(_ARROW_OF_SQL[declared[f]] for f in fields)


def _column(values: tuple, arrow_type: pa.DataType | None) -> pa.Array:
    """A column converted with its declared type, which skips pyarrow's pass inferring one
    from every value; a value of another type (none apply stages) is inferred as before and
    DuckDB casts it on insert."""
    if arrow_type is not None:
        try:
            return pa.array(values, type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    return pa.array(values)


def _arrow(fields: tuple[str, ...], rows: list[tuple], json_columns: tuple[int, ...] = (),
           types: tuple[pa.DataType, ...] | None = None, pacer: Pacer | None = None) -> pa.Table:
    """``rows`` as an Arrow table; the staged dicts of ``json_columns`` become JSON text (a
    column at a time: no row is rebuilt). With a ``pacer`` (the flusher's) and declared
    ``types``, a slice of rows at a time, the pacer giving the GIL away between columns."""
    if pacer is not None and types is not None and len(rows) > slice_rows:
        try:
            return pa.Table.from_batches(
                [_batch(fields, rows[at:at + slice_rows], json_columns, types, pacer)
                 for at in range(0, len(rows), slice_rows)])
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # a value of another type: one table, each column's type inferred as a whole
    columns: list = list(zip(*rows, strict=True))
    for i in json_columns:
        columns[i] = _json_column(columns[i])
    types = types or (None,) * len(fields)
    return pa.table({f: c if isinstance(c, pa.Array) else _column(c, t)
                     for f, c, t in zip(fields, columns, types, strict=True)})


def _batch(fields: tuple[str, ...], rows: list[tuple], json_columns: tuple[int, ...],
           types: tuple[pa.DataType, ...], pacer: Pacer) -> pa.RecordBatch:
    """One slice of rows, every column of its declared type (else Arrow raises)."""
    columns: list = list(zip(*rows, strict=True))
    arrays = []
    for i, (values, arrow_type) in enumerate(zip(columns, types, strict=True)):
        pacer()
        arrays.append(_json_column(values) if i in json_columns
                      else pa.array(values, type=arrow_type))
    return pa.RecordBatch.from_arrays(arrays, names=list(fields))


def _register(cur: duckdb.DuckDBPyConnection, fields: tuple[str, ...], rows: list[tuple],
              json_columns: tuple[int, ...] = (),
              types: tuple[pa.DataType, ...] | None = None, pacer: Pacer | None = None) -> None:
    """Register ``rows`` as ``_rows`` (``_arrow``)."""
    cur.register("_rows", _arrow(fields, rows, json_columns, types, pacer))


def _insert(cur: duckdb.DuckDBPyConnection, table: str, fields: tuple[str, ...],
            rows: list[tuple], verb: str, json_columns: tuple[int, ...] = (),
            pacer: Pacer | None = None) -> None:
    """Write ``rows`` (every column of ``table``, in its order) with ``verb``. A plain INSERT
    goes through a relation on the Arrow table: registering it by name, a statement over it
    and unregistering it cost ~0.2-0.35 ms of CPU more per statement (DuckDB 2.0's Python
    client, a few rows: 0.8-1.0 ms against 0.63-0.68), whatever the rows."""
    if not rows:
        return
    if verb == "INSERT":
        cur.from_arrow(_arrow(fields, rows, json_columns, _TYPES[table], pacer)).insert_into(
            table)
        return
    _register(cur, fields, rows, json_columns, _TYPES[table], pacer)
    try:
        cur.execute(f"{verb} INTO {table} ({', '.join(fields)}) SELECT * FROM _rows")
    finally:
        cur.unregister("_rows")


# The Arrow types of the columns each table's rows are staged with (checked against DuckDB's
# own by tests/runner/test_flush.py).
_TYPES = {table: arrow_types(table, fields) for table, fields in (
    ("events_seen", SEEN_FIELDS), ("runs", RUN_FIELDS), ("decisions", DECISION_FIELDS),
    ("steps", STEP_FIELDS), ("app_tasks", TASK_FIELDS), ("outbox", OUTBOX_FIELDS))}
