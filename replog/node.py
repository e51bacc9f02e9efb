"""The node: the threaded shell that runs a ``ReplicaCore`` against a real log and election.

The *loop* thread applies entries to the state machine in offset order, completes waiting
requests and calls ``on_effects`` and the checkpointer (one thread, so apply calls never
overlap; a failing read of the log is retried with backoff and shown in ``problems()``, only a
failing apply or a truncated log stops it). How a leader writes depends on the log. One that
takes records without waiting (``SendingLog``: Kafka's produce) gets each batch the core
releases on the thread that released it (the request's, the election's, or the loop's once a new
leader's ``LeaderStarted`` applied), under the node's lock so that records go out in seq order,
and the loop waits in ``poll_sent`` for the delivery reports: no thread between the request and
the broker, none between the broker's acknowledgement and apply. Any other log (the file log,
whose append syncs) has an *appender* thread that takes batches from the core and appends each
with one group commit (``append_thread=True`` forces it, to measure against). A follower's loop
reads every record from the log. A leader's applies the records the log acknowledged (with their
offsets) without reading them back, and reads the log only across a gap (records it did not
append: a deposed writer's, or those of an append whose outcome it never learned) and, when
idle, up to the log's end as probed every ``leader_idle_probe_s``; its reader is paused
otherwise, so it fetches nothing in the background. Election callbacks arrive on the election's
thread and take effect at once: a deposed leader fails its pending requests before returning.
``on_role(leading)`` is told each change of leadership where it happens: the loop once its own
LeaderStarted applied (it leads), the election's thread when deposed, the loop when the log
holds a newer writer. Callers must ``start()`` the node, and ``stop()`` it; from asyncio,
wrap ``submit``'s future with ``asyncio.wrap_future``, or hand ``submit_to`` a ``Sink`` of
their own (no ``Future``, whose condition and lock cost an order more than the rest of its
hand-off).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from functools import partial
from operator import itemgetter
from typing import Any, Protocol

from replog.core import DEFAULT_LIMITS, Completion, Limits, ReplicaCore, Role
from replog.entry import Entry
from replog.errors import AppendTimeout, LogTruncated, NotLeader, ReplogError
from replog.protocols import (
    Applied,
    Deposed,
    Elected,
    Election,
    ElectionEvent,
    Forwarder,
    LogAdapter,
    LogReader,
    SendingLog,
    StateMachine,
)


class Sink(Protocol):
    """Where a request's outcome goes: a ``concurrent.futures.Future``, or anything with its two
    setters. One of them is called once, on the thread that settled the request (the node's
    loop, the appender, the election's, a forwarding thread, or the caller's own when the
    request fails at once, its record refused by the log included); it must not block. A setter
    may raise ``InvalidStateError`` (a cancelled future): the outcome is then dropped."""

    def set_result(self, result: Applied) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...

log = logging.getLogger(__name__)

poll_timeout_s = 0.02  # bounds how late a request timeout fires when the log is idle
# A follower holds no request that could time out (it forwards them), and an election reaches
# it through the log (its reader returns the new LeaderStarted): it waits longer per poll, so
# an idle follower's loop wakes 4 times a second, not 50.
follower_poll_timeout_s = 0.25
# After applying what a poll returned, a follower that nobody waits on (no ``wait_applied``:
# a request forwarded through it, a read of its own write) lets records gather this long
# before it polls again. Each wakeup applies on caches other processes used meanwhile (the
# first apply after a pause ~550 µs against ~80 warm), and its reader's fetch returns every
# ``follower_fetch_wait_max_ms`` (10 ms): lingering longer than that takes two fetches' records
# per wakeup (``bench/follower_loop.py``: 10 records per 20 ms cost the loop ~10-20 % less CPU
# per order than 5 per 10 ms, NOISY). A waiter wakes it at once, so what waits is not delayed;
# readers that do not wait see its state up to this much later. 0: poll again at once.
follower_linger_s = 0.02
records_per_poll_max = 1000
forward_threads_max = 32
appender_idle_wait_s = 0.1
append_retry_backoff_s = 0.05  # after a failed append, so a down log is not hammered
read_retry_backoff_max_s = 2.0  # a log that cannot be read (broker restarting) is retried
# A leader reading across a gap (records it knows are there) got nothing for this long, or a
# follower's log ends past where its reader stands (asked of the log's ``tail_offset`` after
# this long without a record): the reader is stuck (a client that lost its broker may not
# fetch again for minutes), so it is reopened where it stands.
reader_stall_s = 5.0
# A leader that applied nothing for this long asks where the log ends and reads whatever is
# not its own up to there: records of an append whose outcome it never learned, or of a newer
# writer (ZooKeeper deposes it then too, but a paused process learns that late).
leader_idle_probe_s = 1.0
# How often a busy loop fails the requests whose deadline passed: every deadline is popped
# from the core's heap once due (a settled request's too), so expiring on every turn took the
# node's lock and popped about one deadline per order; this takes them in batches and fires a
# timeout at most this much late (an idle loop is as late: ``poll_timeout_s``).
expire_every_s = 0.01


class Checkpointer(Protocol):
    def maybe_checkpoint(self, applied_offset: int, writer_id: int, writer_seq: int) -> None: ...


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_by_offset = itemgetter(0)


class Node:
    def __init__(
        self,
        state_machine: StateMachine,
        log: LogAdapter,
        election: Election,
        *,
        node_id: str,
        advertise_url: str,
        forwarder: Forwarder | None = None,
        on_effects: Callable[[Entry, list[Any]], None] | None = None,
        start_offset: int = 0,
        clock: Callable[[], int] = wall_clock_ms,
        checkpointer: Checkpointer | None = None,
        start_writer_id: int = -1,
        start_writer_seq: int = -1,
        limits: Limits = DEFAULT_LIMITS,
        append_thread: bool | None = None,
        on_role: Callable[[bool], None] | None = None,
    ):
        """``append_thread``: None, an appender thread only for a log that cannot ``send``;
        True, always one (a group commit per batch, the way before ``SendingLog``).
        ``on_role(leading)``: called when this node starts or stops leading."""
        self.sm = state_machine
        self.log = log
        self.election = election
        self.node_id = node_id
        self.advertise_url = advertise_url
        self.forwarder = forwarder
        self.on_effects = on_effects
        self.start_offset = start_offset
        self.clock = clock
        self.checkpointer = checkpointer
        self.on_role = on_role
        self._leading = False  # as last told to ``on_role`` (a node starts as a follower)
        self._role_lock = threading.Lock()
        self.core = ReplicaCore(
            start_offset=start_offset,
            start_writer_id=start_writer_id,
            start_writer_seq=start_writer_seq,
            limits=limits,
        )
        if append_thread is None:
            append_thread = not isinstance(log, SendingLog)
        elif not append_thread and not isinstance(log, SendingLog):
            raise ValueError(f"{type(log).__name__} cannot send records without an appender")
        # The leader's records go to the log on the submitting thread; None: the appender's.
        self._sender: SendingLog | None = None if append_thread else log  # type: ignore[assignment]
        # Reports of sent records, appended by the log's callbacks on whichever thread served
        # them (a deque: no lock there), taken and fed to the core by the loop under ``_lock``.
        self._sent: deque[tuple[Entry, int, ReplogError | None]] = deque()
        self._unreported = 0  # records sent whose report the loop has not taken (under _lock)
        self._send_retry_at: float | None = None  # a refused LeaderStarted is sent again then
        self._tail_unknown = False  # a record's offset was not reported: probe the log's end
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # appender: a batch may be ready
        self._own_ready = threading.Condition(self._lock)  # a leader's loop: records acked
        self._applied_cv = threading.Condition()
        self._applied = start_offset - 1
        self._waiters = 0  # threads in ``wait_applied`` (under ``_applied_cv``)
        self._stop_lingering = threading.Event()  # a waiter came, or the role may change
        self._futures: dict[int, Sink] = {}
        self._running = False
        self._threads: list[threading.Thread] = []
        self._forwarders = ThreadPoolExecutor(forward_threads_max, thread_name_prefix="forward")
        self._forwarding: set[Future[Applied]] = set()
        self.failure: BaseException | None = None
        self.read_error: str | None = None  # the log's last read failure, until a read works
        self.append_error: str | None = None  # the log's last append failure, until one works
        self._reader: LogReader | None = None
        self._reader_follower = True  # opened with a follower's fetch settings
        self._reading = False  # fetching: always on a follower, across a gap on a leader
        self._read_at = 0.0  # the reader started reading or last returned records
        self._progress_at = 0.0  # the loop last applied or skipped a record
        self._probed_at = 0.0
        self._backoff = poll_timeout_s
        self.reader_reopens = 0
        self.records_read = 0  # records taken from the log's reader
        self.reads = 0  # polls of the reader that returned records
        self.records_own = 0  # records a leader applied without reading them back

    # -- public -------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER

    @property
    def writer_id(self) -> int:
        """The largest writer id accepted from the log: the current leader's, once it wrote."""
        return self.core.fence.writer_id

    @property
    def my_writer_id(self) -> int | None:
        return self.core.my_writer_id

    @property
    def applied_offset(self) -> int:
        return self._applied

    def leader_url(self) -> str | None:
        if self.core.role is not Role.FOLLOWER:
            return self.advertise_url
        return self.election.leader_url()

    def start(self) -> None:
        """Open the log at ``start_offset`` and join the election.

        Raises ``LogTruncated`` when the log starts after ``start_offset``: the entries in
        between are gone, and applying what follows would build a state no other replica has.
        """
        try:
            first = self.log.first_offset()
        except Exception as e:  # noqa: BLE001 - log unreachable now: the reader reports a gap later
            log.warning("could not ask the log where it starts: %s", e)
            first = 0
        if self.start_offset < first:
            raise LogTruncated(
                f"the log starts at offset {first} but this node must replay from "
                f"{self.start_offset}: restore a newer checkpoint, or lengthen the log's "
                "retention"
            )
        self._reader = self.log.open_reader(self.start_offset, follower=True)
        self._reader_follower = self._reading = True  # a node starts as a follower
        self._running = True
        threads: list[tuple[str, Callable[[], None]]] = [("loop", self._loop)]
        if self._sender is None:
            threads.append(("appender", self._appender))
        for name, target in threads:
            t = threading.Thread(target=target, name=f"replog-{name}-{self.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        self.election.start(self.node_id, self.advertise_url, self._on_election)

    def stop(self) -> None:
        self._running = False
        self._stop_lingering.set()
        self.election.stop()
        with self._lock:
            completions = self.core.deposed("node stopping")
            self._wake.notify_all()
        self._resolve(completions)
        for t in self._threads:
            t.join(timeout=5)
        if self._reader is not None:
            self._reader.close()
        self._forwarders.shutdown(wait=False, cancel_futures=True)
        for fut in list(self._forwarding):  # cancelled before they ran: callers must not hang
            _fail(fut, NotLeader("node stopping"))

    def submit(self, kind: str, payload: bytes, timeout_s: float) -> Future[Applied]:
        """Append an entry; the future resolves once this node applied it."""
        fut: Future[Applied] = Future()
        self.submit_to(kind, payload, timeout_s, fut)
        return fut

    def submit_to(self, kind: str, payload: bytes, timeout_s: float, sink: Sink) -> None:
        """Append an entry; ``sink`` gets the outcome once this node applied it (or the error)."""
        error: ReplogError | None = None
        settled: list[tuple[Sink, Completion]] | None = None
        with self._lock:
            if self.core.role is not Role.FOLLOWER:
                try:
                    token = self.core.submit(kind, payload, self.clock(), int(timeout_s * 1000))
                except ReplogError as e:
                    error = e
                else:
                    self._futures[token] = sink
                    if self._sender is None:
                        self._wake.notify()
                        return
                    refused = self._send_batches()
                    if not refused:
                        return
                    settled = self._take(refused)
        if settled is not None:  # the log refused the record at once (this one, or others too)
            _deliver(settled)
            return
        if error is not None:
            _fail(sink, error)
            return
        leader = self.election.leader_url()
        if self.forwarder is None or leader is None or leader == self.advertise_url:
            _fail(sink, NotLeader("no leader to forward to", leader))
            return
        fut: Future[Applied] = sink if isinstance(sink, Future) else Future()
        if fut is not sink:  # forwarding is rare (a follower's own submits): a Future relays
            fut.add_done_callback(lambda f: _relay(f, sink))
        self._forwarding.add(fut)
        fut.add_done_callback(self._forwarding.discard)
        self._forwarders.submit(self._forward, fut, leader, kind, payload, timeout_s)

    def problems(self) -> list[str]:
        """What keeps this node from working now (empty when healthy), for ``/healthz``."""
        out = []
        if self.failure is not None:
            out.append(f"stopped: {type(self.failure).__name__}: {self.failure}")
        if self.read_error:
            out.append(f"log read failing: {self.read_error}")
        if self.append_error:
            out.append(f"log append failing: {self.append_error}")
        election_error = getattr(self.election, "last_error", None)
        if election_error:
            out.append(f"election join failing: {election_error}")
        return out

    def wait_applied(self, min_offset: int, timeout_s: float) -> bool:
        """Block until this node applied ``min_offset`` (read-your-writes); False on timeout.
        A follower lingering between polls (``follower_linger_s``) polls again at once."""
        with self._applied_cv:
            if self._applied >= min_offset:
                return True
            self._waiters += 1
            self._stop_lingering.set()
            try:
                return self._applied_cv.wait_for(lambda: self._applied >= min_offset, timeout_s)
            finally:
                self._waiters -= 1

    # -- election -----------------------------------------------------------------------
    def _on_election(self, event: ElectionEvent) -> None:
        ok, completions = True, []
        with self._lock:
            if isinstance(event, Deposed):
                completions = self.core.deposed(event.reason or "session lost")
            elif isinstance(event, Elected):
                ok, completions = self.core.elected(event.writer_id)
                if self._sender is None:
                    self._wake.notify()
                elif ok:  # its LeaderStarted goes out now (``send`` does not wait)
                    completions = completions + self._send_batches()
            self._own_ready.notify()  # a leader's loop waiting for its records reads as a follower
        self._stop_lingering.set()  # a follower's loop takes its new role at once
        self._resolve(completions)
        self._note_role()
        if not ok:  # the log already has a newer writer: rejoin with a larger id
            threading.Thread(target=self.election.resign, daemon=True).start()

    def _note_role(self) -> None:
        """Tell ``on_role`` when leadership changed since it was last told (called where the
        role can change: the election's events, the loop's own LeaderStarted, a newer writer)."""
        if self.on_role is None or (self.core.role is Role.LEADER) == self._leading:
            return
        with self._role_lock:  # the election's thread and the loop may both see a change
            leading = self.core.role is Role.LEADER
            if leading == self._leading:
                return
            self._leading = leading
            self.on_role(leading)

    # -- threads ------------------------------------------------------------------------
    def _appender(self) -> None:
        while self._running:
            with self._wake:
                while self._running and not self.core.has_batch():
                    self._wake.wait(appender_idle_wait_s)
                batch = self.core.take_batch(self.clock())
            if not batch:
                continue
            try:
                offsets = self.log.append([e.encode() for e in batch])
                self.append_error = None
            except Exception as e:  # the log's failure becomes the requests' failure
                log.warning("append of %d entries failed: %s", len(batch), e)
                self.append_error = f"{type(e).__name__}: {e}"
                with self._lock:
                    completions = self.core.append_failed([x.seq for x in batch], str(e))
                self._resolve(completions)
                time.sleep(append_retry_backoff_s)
                continue
            tail = None
            if offsets is None:  # the log could not say where: the loop reads up to its end
                try:
                    tail = self.log.tail_offset()
                except Exception as e:  # noqa: BLE001 - the loop's idle probe asks again
                    log.debug("asking where the log ends failed: %s", e)
            with self._lock:
                if offsets is not None:
                    self.core.appended(batch, offsets)
                elif tail is not None:
                    self.core.log_ends_at(tail)
                self._own_ready.notify()

    def _loop(self) -> None:
        self._read_at = self._progress_at = self._probed_at = time.monotonic()
        expire_at = 0.0
        try:
            while self._running:
                if self.core.role is Role.FOLLOWER:
                    self._follow()
                else:
                    self._lead()
                now = time.monotonic()
                if now >= expire_at:
                    expire_at = now + expire_every_s
                    with self._lock:
                        completions = self.core.expire(self.clock())
                    self._resolve(completions)
        except BaseException as e:  # a failing apply must stop the node, not skip an entry
            log.exception("node loop failed")
            self.failure = e
            self._running = False
            with self._lock:
                completions = self.core.deposed("node failed")
            self._resolve(completions)
            self.election.stop()

    def _follow(self) -> None:
        """One turn of a follower: read what the log holds from the next offset, apply it."""
        if self._reader is None or not self._reader_follower:  # deposed: read everything
            if not self._open_reader(follower=True):
                self._sleep_backoff()
                return
        if self._unreported:  # sent while it led: their reports only fail what is left
            self._poll_sent(0)
            self._take_reports()
        now = time.monotonic()
        if self._read_at < now - reader_stall_s and self._probed_at < now - reader_stall_s:
            self._probed_at = now
            if self._log_is_ahead():
                self._reopen_reader("the log holds records not read for %.0fs")
        if self._read(follower_poll_timeout_s) and follower_linger_s > 0:
            self._linger()

    def _linger(self) -> None:
        """Let records gather for ``follower_linger_s`` unless someone waits on this node's
        applied offset (then, or once one comes, it polls again at once)."""
        self._stop_lingering.clear()
        # what came before the clear (its set() is lost): a waiter, an election, a stop
        if self._waiters or not self._running or self.core.role is not Role.FOLLOWER:
            return
        self._stop_lingering.wait(follower_linger_s)

    def _lead(self) -> None:
        """One turn of a leader (or a starting one): take the log's reports of its records,
        apply its own acknowledged records at the next offset; read the log only across a gap;
        otherwise wait for acknowledgements (in ``poll_sent``, or for the appender)."""
        if self._reader is not None and self._reader_follower:  # elected: stop its fetching
            self._close_reader()
        core = self.core
        settled = None
        with self._lock:
            if self._sent:
                settled = self._take(self._absorb_reports())
            own = core.take_own()
            read = not own and core.must_read()
        if settled:
            _deliver(settled)
        if own:
            for entry in own:
                self._process(entry)
            self.records_own += len(own)
            self._progress_at = time.monotonic()
            self._publish()
            return
        if read:
            if core.role is Role.FOLLOWER:  # deposed meanwhile: the next turn follows
                return
            if not self._reading and not self._start_reading():
                self._sleep_backoff()
                return
            if self._read_at < time.monotonic() - reader_stall_s:
                self._reopen_reader("a gap in the log was not read for %.0fs")
            self._read()
            return
        if self._reading:  # caught up: the reader would fetch the leader's own records next
            self._reader.pause()  # type: ignore[union-attr]
            self._reading = False
        now = time.monotonic()
        if self._tail_unknown or self._progress_at < now - leader_idle_probe_s \
                and self._probed_at < now - leader_idle_probe_s:
            self._probed_at, self._tail_unknown = now, False
            try:
                tail = self.log.tail_offset()
            except Exception as e:  # noqa: BLE001 - log unreachable: asked again later
                log.debug("asking where the log ends failed: %s", e)
                return
            with self._lock:
                core.log_ends_at(tail)
            return
        if self._sender is None:
            with self._lock:
                if not core.has_work():
                    self._own_ready.wait(poll_timeout_s)
            return
        if self._send_retry_at is not None and now >= self._send_retry_at:
            self._retry_sends()
        elif not self._sent:  # nothing to apply: wait for the broker's acknowledgements
            self._poll_sent(poll_timeout_s)

    # -- a log that sends (``SendingLog``) -----------------------------------------------
    def _send_batches(self) -> list[Completion]:
        """Under ``_lock``: send every batch the core releases, in seq order (``send`` does not
        wait; the loop takes the reports). Stops at the first record the log refuses: it and
        the rest of its batch fail, and the loop sends what is left after a backoff (a refused
        LeaderStarted is queued again)."""
        core, sender, on_sent = self.core, self._sender, self._on_sent
        while core.has_batch():
            batch = core.take_batch(self.clock())
            for i, entry in enumerate(batch):
                try:
                    sender.send(entry.encode(), partial(on_sent, entry))  # type: ignore[union-attr]
                except Exception as e:  # the log's refusal becomes the requests' failure
                    log.warning("sending %d entries failed: %s", len(batch) - i, e)
                    self.append_error = f"{type(e).__name__}: {e}"
                    self._send_retry_at = time.monotonic() + append_retry_backoff_s
                    return core.append_failed([x.seq for x in batch[i:]], str(e))
                self._unreported += 1
        return []

    def _on_sent(self, entry: Entry, offset: int, error: ReplogError | None) -> None:
        self._sent.append((entry, offset, error))  # any thread; taken by the loop

    def _absorb_reports(self) -> list[Completion]:
        """Under ``_lock``: feed the reports taken so far to the core: the records the log
        took, in offset order whatever order the reports came in (``appended``), and the
        failed ones (``append_failed``: indeterminate, the log may hold them; a record after
        one of them is then a gap the leader reads across)."""
        sent, core = self._sent, self.core
        took: list[tuple[int, Entry]] = []
        failed: list[int] = []
        error: ReplogError | None = None
        n = 0
        while sent:
            entry, offset, err = sent.popleft()
            n += 1
            if err is not None:
                failed.append(entry.seq)
                error = err
            elif offset < 0:  # the log could not say where: read up to its end
                self._tail_unknown = True
            else:
                took.append((offset, entry))
        self._unreported = max(0, self._unreported - n)
        if took:
            self.append_error = None
            if len(took) > 1:
                took.sort(key=_by_offset)
            core.appended([e for _, e in took], [o for o, _ in took])
        if not failed:
            return []
        log.warning("%d entries were not appended: %s", len(failed), error)
        self.append_error = f"{type(error).__name__}: {error}"
        self._send_retry_at = time.monotonic() + append_retry_backoff_s
        return core.append_failed(failed, str(error))

    def _take_reports(self) -> None:
        with self._lock:
            settled = self._take(self._absorb_reports()) if self._sent else None
        if settled:
            _deliver(settled)

    def _retry_sends(self) -> None:
        """Send what a refusal or a failed record left queued (a LeaderStarted, or the rest
        of a batch), once ``append_retry_backoff_s`` passed."""
        with self._lock:
            self._send_retry_at = None
            settled = self._take(self._send_batches())
        _deliver(settled)

    def _poll_sent(self, timeout_s: float) -> None:
        try:
            self._sender.poll_sent(timeout_s)  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - a client in trouble: the next turn polls again
            log.warning("%s: polling the log's delivery reports failed: %s", self.node_id, e)
            time.sleep(poll_timeout_s)

    def _read(self, timeout_s: float = poll_timeout_s) -> bool:
        """Poll the reader once and apply what it returned, in order; whether it returned
        records."""
        try:
            records = self._reader.poll(timeout_s, records_per_poll_max)  # type: ignore[union-attr]
            self.read_error, self._backoff = None, poll_timeout_s
        except LogTruncated:
            raise
        except Exception as e:  # noqa: BLE001 - a log being restarted: read again
            self.read_error = f"{type(e).__name__}: {e}"
            log.warning("reading the log failed, retrying in %.2fs: %s", self._backoff,
                        self.read_error)
            self._sleep_backoff()
            return False
        if not records:
            return False
        core = self.core
        for offset, data in records:
            if offset >= core.next_offset:  # else redelivered: processed already
                self._process(Entry.decode(data, offset))
        self.records_read += len(records)
        self.reads += 1
        self._read_at = self._progress_at = time.monotonic()
        self._publish()
        return True

    def _publish(self) -> None:
        # The condition only when someone waits (nearly never on a leader): a waiter counts
        # itself under it before it tests ``_applied``, so it sees this offset or is notified.
        self._applied = self.core.applied_offset
        if self._waiters:
            with self._applied_cv:
                self._applied_cv.notify_all()

    def _sleep_backoff(self) -> None:
        time.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, read_retry_backoff_max_s)

    def _log_is_ahead(self) -> bool:
        """Whether the log ends past this node's next offset (False when it cannot say)."""
        try:
            return self.log.tail_offset() > self.core.next_offset
        except Exception as e:  # noqa: BLE001 - log unreachable: the reader's retries report it
            log.debug("asking where the log ends failed: %s", e)
            return False

    def _reopen_reader(self, why: str) -> None:
        log.warning("%s: " + why + " and nothing was read since: reopening the reader at "
                    "offset %d", self.node_id, reader_stall_s, self.core.next_offset)
        if self._open_reader(self._reader_follower):
            self.reader_reopens += 1

    def _start_reading(self) -> bool:
        """A leader's reader fetches from the next offset (opened on first need, then resumed
        where the gap starts); False if it could not be."""
        if self._reader is None:
            return self._open_reader(follower=False)
        try:
            self._reader.seek(self.core.next_offset)
        except Exception as e:  # noqa: BLE001 - a client in trouble: a new one
            log.warning("%s: seeking the reader failed: %s", self.node_id, e)
            return self._open_reader(follower=False)
        self._reading, self._read_at = True, time.monotonic()
        return True

    def _open_reader(self, follower: bool) -> bool:
        """Read on from the next offset with a new reader (on the loop thread, between polls:
        nothing read is lost); the old one stays if the new one cannot be opened."""
        try:
            fresh = self.log.open_reader(self.core.next_offset, follower=follower)
        except Exception as e:  # noqa: BLE001 - keep the old reader; tried again later
            self.read_error = f"opening a reader failed: {type(e).__name__}: {e}"
            log.warning("%s", self.read_error)
            return False
        old, self._reader, self._reader_follower = self._reader, fresh, follower
        self._reading, self._read_at = True, time.monotonic()
        _close(old)
        return True

    def _close_reader(self) -> None:
        old, self._reader, self._reading = self._reader, None, False
        _close(old)

    def _process(self, entry: Entry) -> None:
        with self._lock:
            step = self.core.begin(entry)
        if step.resign:
            log.warning("%s gives up leadership: the log holds a newer writer", self.node_id)
            self._note_role()
            threading.Thread(target=self.election.resign, daemon=True).start()
        if not step.apply:  # skipped (fenced or redelivered): processed as it is
            self._applied = self.core.applied_offset
            self._resolve(step.completions)
            return
        if step.completions:
            self._resolve(step.completions)
        effects = self.sm.apply(step.entry)
        # Published only once applied (a reader never sees an offset whose entry is not in the
        # state), and before acks go out (a client that got its answer reads its own write).
        self._applied = step.entry.offset
        # Only this node's own entries complete requests or start its leadership; another
        # writer's (every entry on a follower) need not take the lock again. A node elected
        # meanwhile has written nothing with its id before this entry.
        if step.entry.writer_id == self.core.my_writer_id:
            with self._lock:  # one acquisition: finish, release what queued, take the sinks
                completions = self.core.finish(step, effects)
                if self.core.has_batch():  # its LeaderStarted applied: the queued requests go
                    if self._sender is None:
                        self._wake.notify()
                    else:
                        completions = completions + self._send_batches()
                settled = self._take(completions) if completions else None
            if settled:
                _deliver(settled)
            if self._leading is not (self.core.role is Role.LEADER):
                self._note_role()  # leading once its LeaderStarted applied
        if self.on_effects is not None:
            self.on_effects(step.entry, effects)
        if self.checkpointer is not None:
            fence = self.core.fence
            self.checkpointer.maybe_checkpoint(step.entry.offset, fence.writer_id, fence.seq)

    def _forward(
        self, fut: Future[Applied], leader: str, kind: str, payload: bytes, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        try:
            applied = self.forwarder.forward(leader, kind, payload, timeout_s)  # type: ignore[union-attr]
            if not self.wait_applied(applied.offset, max(0.0, deadline - time.monotonic())):
                raise AppendTimeout("applied on the leader, not yet here")
            if not fut.done():
                fut.set_result(applied)
        except BaseException as e:
            _fail(fut, e)

    def _resolve(self, completions: list[Completion]) -> None:
        if not completions:
            return
        with self._lock:
            settled = self._take(completions)
        _deliver(settled)

    def _take(self, completions: list[Completion]) -> list[tuple[Sink, Completion]]:
        """The sinks of ``completions`` still waiting, taken out (under ``_lock``)."""
        futures = self._futures
        out = []
        for c in completions:
            sink = futures.pop(c.token, None)
            if sink is not None:
                out.append((sink, c))
        return out


def _deliver(settled: list[tuple[Sink, Completion]]) -> None:
    for sink, c in settled:
        try:
            if c.error is not None:
                sink.set_exception(c.error)
            else:
                sink.set_result(c.result)  # type: ignore[arg-type]
        except InvalidStateError:  # cancelled by its caller
            pass


def _close(reader: LogReader | None) -> None:
    if reader is None:
        return
    try:
        reader.close()
    except Exception:  # the old reader is dropped anyway
        log.debug("closing a reader failed", exc_info=True)


def _relay(fut: Future[Applied], sink: Sink) -> None:
    if fut.cancelled():
        _fail(sink, NotLeader("forwarding cancelled"))
    elif (exc := fut.exception()) is not None:
        _fail(sink, exc)
    else:
        try:
            sink.set_result(fut.result())
        except InvalidStateError:
            pass


def _fail(fut: Sink, error: BaseException) -> None:
    try:
        fut.set_exception(error)
    except InvalidStateError:  # already resolved by another path
        pass
