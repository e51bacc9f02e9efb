"""The node: the threaded shell that runs a ``ReplicaCore`` against a real log and election.

Two threads: the *loop* consumes the log, applies entries to the state machine, completes
waiting requests and calls ``on_effects`` and the checkpointer (one thread, so apply calls
never overlap; a failing read of the log is retried with backoff and shown in ``problems()``,
only a failing apply or a truncated log stops it); the *appender* takes batches from the
core and appends each with one group commit. Election callbacks arrive on the election's
thread and take effect at once: a deposed leader fails its pending requests before
returning. Callers must ``start()`` the node, and ``stop()`` it; from asyncio, wrap
``submit``'s future with ``asyncio.wrap_future``, or hand ``submit_to`` a ``Sink`` of their own
(no ``Future``, whose condition and lock cost an order more than the rest of its hand-off).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
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
    StateMachine,
)


class Sink(Protocol):
    """Where a request's outcome goes: a ``concurrent.futures.Future``, or anything with its
    two setters. One of them is called once, on the thread that settled the request (the
    node's loop, the appender, the election's, a forwarding thread, or the caller's own when
    the request fails at once); it must not block. A setter may raise ``InvalidStateError``
    (a cancelled future): the outcome is then dropped."""

    def set_result(self, result: Applied) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...

log = logging.getLogger(__name__)

poll_timeout_s = 0.02  # bounds how late a request timeout fires when the log is idle
records_per_poll_max = 1000
forward_threads_max = 32
appender_idle_wait_s = 0.1
append_retry_backoff_s = 0.05  # after a failed append, so a down log is not hammered
read_retry_backoff_max_s = 2.0  # a log that cannot be read (broker restarting) is retried
# The log took an append this long ago (the leader knows), or ends past where the reader
# stands (a follower asks the log's ``tail_offset`` after this long without a record), and the
# reader has returned nothing since: it is stuck (a client that lost its broker may not fetch
# again for minutes), so it is reopened where it stands.
reader_stall_s = 5.0


class Checkpointer(Protocol):
    def maybe_checkpoint(self, applied_offset: int, writer_id: int, writer_seq: int) -> None: ...


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
    ):
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
        self.core = ReplicaCore(
            start_offset=start_offset,
            start_writer_id=start_writer_id,
            start_writer_seq=start_writer_seq,
            limits=limits,
        )
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # appender: a batch may be ready
        self._applied_cv = threading.Condition()
        self._applied = start_offset - 1
        self._futures: dict[int, Sink] = {}
        self._running = False
        self._threads: list[threading.Thread] = []
        self._forwarders = ThreadPoolExecutor(forward_threads_max, thread_name_prefix="forward")
        self._forwarding: set[Future[Applied]] = set()
        self.failure: BaseException | None = None
        self.read_error: str | None = None  # the log's last read failure, until a read works
        self.append_error: str | None = None  # the log's last append failure, until one works
        # When the last append the log took began: the reader may return the records before
        # the append returns, so a read after this time covers them.
        self._appended_at = 0.0
        self.reader_reopens = 0

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
        self._reader_follower = True  # a node starts as a follower
        self._running = True
        for name, target in (("loop", self._loop), ("appender", self._appender)):
            t = threading.Thread(target=target, name=f"replog-{name}-{self.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        self.election.start(self.node_id, self.advertise_url, self._on_election)

    def stop(self) -> None:
        self._running = False
        self.election.stop()
        with self._lock:
            completions = self.core.deposed("node stopping")
            self._wake.notify_all()
        self._resolve(completions)
        for t in self._threads:
            t.join(timeout=5)
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
        with self._lock:
            if self.core.role is not Role.FOLLOWER:
                try:
                    token = self.core.submit(kind, payload, self.clock(), int(timeout_s * 1000))
                except ReplogError as e:
                    error = e
                else:
                    self._futures[token] = sink
                    self._wake.notify()
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
        """Block until this node applied ``min_offset`` (read-your-writes); False on timeout."""
        with self._applied_cv:
            return self._applied_cv.wait_for(lambda: self._applied >= min_offset, timeout_s)

    # -- election -----------------------------------------------------------------------
    def _on_election(self, event: ElectionEvent) -> None:
        ok, completions = True, []
        with self._lock:
            if isinstance(event, Deposed):
                completions = self.core.deposed(event.reason or "session lost")
            elif isinstance(event, Elected):
                ok, completions = self.core.elected(event.writer_id)
                self._wake.notify()
        self._resolve(completions)
        if not ok:  # the log already has a newer writer: rejoin with a larger id
            threading.Thread(target=self.election.resign, daemon=True).start()

    # -- threads ------------------------------------------------------------------------
    def _appender(self) -> None:
        while self._running:
            with self._wake:
                while self._running and not self.core.has_batch():
                    self._wake.wait(appender_idle_wait_s)
                batch = self.core.take_batch(self.clock())
            if not batch:
                continue
            began = time.monotonic()
            try:
                self.log.append([e.encode() for e in batch])
                self.append_error = None
                self._appended_at = began
            except Exception as e:  # the log's failure becomes the requests' failure
                log.warning("append of %d entries failed: %s", len(batch), e)
                self.append_error = f"{type(e).__name__}: {e}"
                with self._lock:
                    completions = self.core.append_failed([x.seq for x in batch], str(e))
                self._resolve(completions)
                time.sleep(append_retry_backoff_s)

    def _loop(self) -> None:
        backoff = poll_timeout_s
        read_at = probed_at = time.monotonic()
        try:
            while self._running:
                following = self.core.role is Role.FOLLOWER
                if following != self._reader_follower:  # led or deposed: read as the role asks
                    self._swap_reader(following)
                now = time.monotonic()
                if read_at < self._appended_at < now - reader_stall_s:
                    self._reopen_reader("the log took an append over %.0fs ago")
                    read_at = now
                elif read_at < now - reader_stall_s and probed_at < now - reader_stall_s:
                    probed_at = now
                    if self._log_is_ahead():
                        self._reopen_reader("the log holds records not read for %.0fs")
                        read_at = now
                try:
                    records = self._reader.poll(poll_timeout_s, records_per_poll_max)
                    self.read_error, backoff = None, poll_timeout_s
                except LogTruncated:
                    raise
                except Exception as e:  # noqa: BLE001 - a log being restarted: read again
                    self.read_error = f"{type(e).__name__}: {e}"
                    log.warning("reading the log failed, retrying in %.2fs: %s", backoff,
                                self.read_error)
                    time.sleep(backoff)
                    backoff = min(backoff * 2, read_retry_backoff_max_s)
                    records = []
                for offset, data in records:
                    self._process(Entry.decode(data, offset))
                if records:
                    read_at = time.monotonic()
                    with self._applied_cv:
                        self._applied = self.core.applied_offset
                        self._applied_cv.notify_all()
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
        if self._swap_reader(self._reader_follower):
            self.reader_reopens += 1

    def _swap_reader(self, follower: bool) -> bool:
        """Read on from the next offset with a new reader (on the loop thread, between polls:
        nothing read is lost); the old one stays if the new one cannot be opened."""
        try:
            fresh = self.log.open_reader(self.core.next_offset, follower=follower)
        except Exception as e:  # noqa: BLE001 - keep the old reader; tried again later
            self.read_error = f"reopening the reader failed: {type(e).__name__}: {e}"
            log.warning("%s", self.read_error)
            return False
        old, self._reader, self._reader_follower = self._reader, fresh, follower
        try:
            old.close()
        except Exception:  # the old reader is dropped anyway
            log.debug("closing the old reader failed", exc_info=True)
        return True

    def _process(self, entry: Entry) -> None:
        with self._lock:
            step = self.core.begin(entry)
        if step.resign:
            log.warning("%s gives up leadership: the log holds a newer writer", self.node_id)
            threading.Thread(target=self.election.resign, daemon=True).start()
        if not step.apply:  # skipped (fenced or redelivered): processed as it is
            self._applied = self.core.applied_offset
            self._resolve(step.completions)
            return
        self._resolve(step.completions)
        effects = self.sm.apply(step.entry)
        # Published only once applied (a reader never sees an offset whose entry is not in the
        # state), and before acks go out (a client that got its answer reads its own write).
        self._applied = step.entry.offset
        with self._lock:  # one acquisition: finish, wake the appender, take the sinks
            completions = self.core.finish(step, effects)
            if self.core.has_batch():
                self._wake.notify()
            settled = self._take(completions) if completions else None
        if settled:
            _deliver(settled)
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
