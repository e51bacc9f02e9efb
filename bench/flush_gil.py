"""How long the DuckDB flusher keeps other threads from Python: a canary thread during flushes.

``bench/apply_cost.py --canary`` runs this over its feed. The apply thread applies the feed;
each time an entry handed a generation to the flusher (``runner.state.buffer.RowBuffer``), the
apply thread waits (the GIL released) until it landed, then stays idle for as long again (a quiet
window: the machine's own noise, measured in the same moments). Meanwhile a canary thread
sleeps 0.2 ms in a loop and notes each wakeup more than 1 ms late: a wait that began within a
flush (from the flusher's start of its write until the generation landed) was for the
flusher's GIL, or for a core (the quiet windows show how often that happens alone).
The flusher's CPU (its thread's clock) and the apply thread's CPU (around each ``apply`` call)
are reported per order, so that work moved from one to the other shows. On a busy machine the
canary's wakeups are late for a core as often as for the GIL: ``--rt`` runs the canary and the
flusher under SCHED_FIFO (root; the flusher's share is a few hundred ms of CPU a run).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from replog.entry import Entry
from runner import gcpolicy
from runner.state import buffer
from runner.state.machine import RunnerStateMachine

period_s = 0.0002  # the canary's sleep
late_s = 0.001  # a wakeup later than this is counted


class Canary:
    """A thread sleeping ``period_s`` in a loop; keeps (woke, late s) of each late wakeup."""

    def __init__(self, realtime: bool = False) -> None:
        self.realtime = realtime
        self.late: list[tuple[float, float]] = []
        self.wakeups = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)

    def _run(self) -> None:
        if self.realtime:
            realtime(0)
        clock, late, sleep = time.perf_counter, self.late, time.sleep
        n = 0
        while not self._stop.is_set():
            asked = clock()
            sleep(period_s)
            woke = clock()
            n += 1
            if woke - asked - period_s > late_s:
                late.append((woke, woke - asked - period_s))
        self.wakeups = n

    def __enter__(self) -> Canary:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def within(self, start: float, end: float) -> list[float]:
        """The late wakeups (s) whose wait for the GIL began in [start, end]."""
        return [late for woke, late in self.late if start <= woke - late <= end]


def realtime(tid: int) -> None:
    """The thread ``tid`` (0: this one) under SCHED_FIFO: the other processes of a busy machine
    no longer delay its wakeups, so that a late wakeup is a wait for the GIL (needs root)."""
    os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))


def _thread_cpu_ns(thread: threading.Thread) -> int:
    return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))


def run(feed: Any, measured_from: int, serving_gc: bool, rt: bool = False) -> dict[str, Any]:
    """One pass over the feed's measured entries (see the module doc). ``rt``: the canary and
    the flusher run under SCHED_FIFO (``realtime``; the apply thread does not, and waits while
    the flusher works), so that the machine's other work hardly shows in the late wakeups."""
    # The feed brings 50 orders a second of log time, so generations would be cut by log time
    # (``handoff_log_ms_max``) at ~1,500 orders; a node at 1,000 orders/s cuts them by entries
    # (~3,070 orders), the size whose flushes held the GIL longest.
    buffer.handoff_log_ms_max, log_ms_max = 1 << 62, buffer.handoff_log_ms_max
    # A flush is timed from the flusher's start of the write: until then the apply thread may
    # hold the GIL, and (under ``rt``, an ordinary thread among the machine's others) wait for
    # a core while it does.
    write, started = buffer._write, []  # noqa: SLF001

    def timed_write(*args: Any) -> None:
        started.append(time.perf_counter())
        write(*args)

    buffer._write = timed_write  # noqa: SLF001
    scratch = Path(tempfile.mkdtemp(prefix="railflow-flush-gil-"))
    sm = RunnerStateMachine(scratch / "node")
    buf = sm._buffer  # noqa: SLF001 - the bench watches the flusher's hand-offs
    try:
        for offset, raw in feed.records[:measured_from]:
            sm.apply(Entry.decode(raw, offset))
        sm.flush()
        if serving_gc:
            gcpolicy.settle()
        measured = feed.records[measured_from:]
        orders = sum(1 for _, raw in measured if b"EventReceived" in raw[:64])
        flushes: list[tuple[float, float]] = []
        quiet: list[tuple[float, float]] = []
        apply_ns = 0
        clock, thread_ns = time.perf_counter, time.thread_time_ns

        def landed() -> None:
            with buf._landed:  # noqa: SLF001
                buf._landed.wait_for(lambda: not buf._in_flight)  # noqa: SLF001
            end = clock()
            start = started.pop()
            flushes.append((start, end))
            time.sleep(end - start)
            quiet.append((end, clock()))

        if rt:
            realtime(buf._thread.native_id)  # noqa: SLF001
        with Canary(rt) as canary:
            time.sleep(0.05)
            flusher0 = _thread_cpu_ns(buf._thread)  # noqa: SLF001
            for offset, raw in measured:
                t0 = thread_ns()
                sm.apply(Entry.decode(raw, offset))
                apply_ns += thread_ns() - t0
                if buf._in_flight:  # noqa: SLF001 - this entry handed a generation off
                    landed()
            if buf.current.rows():  # the last, partial generation
                with buf._landed:  # noqa: SLF001
                    buf._hand_off_locked()  # noqa: SLF001
                landed()
            flusher_ns = _thread_cpu_ns(buf._thread) - flusher0  # noqa: SLF001
        per_flush = [canary.within(s, e) for s, e in flushes]
        per_quiet = [canary.within(s, e) for s, e in quiet]
        return {
            "orders": orders, "flushes": len(flushes),
            "flush_ms": statistics.median((e - s) * 1e3 for s, e in flushes),
            "late_per_flush": sum(map(len, per_flush)) / len(flushes),
            "late_max_ms": max((max(x, default=0.0) for x in per_flush), default=0.0) * 1e3,
            "late_per_quiet": sum(map(len, per_quiet)) / len(quiet),
            "quiet_max_ms": max((max(x, default=0.0) for x in per_quiet), default=0.0) * 1e3,
            "flusher_us": flusher_ns / orders / 1e3,
            "apply_us": apply_ns / orders / 1e3,
        }
    finally:
        buffer.handoff_log_ms_max, buffer._write = log_ms_max, write  # noqa: SLF001
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
