"""A follower's loop in one process, no Kafka: what applying records a few at a time costs.

A follower's ``replog-loop`` measured ~145 µs per order on the cluster against ~55-70 for
apply alone (``bench/apply_cost.py``, every record back to back). This runs a follower
``replog.Node`` with the real state machine (the metrics engine, W1's metrics, W3) on
``bench/apply_cost.py``'s feed, read from memory by a reader that hands out a few records per
poll and sleeps some ms before each (``SETTINGS``: a Kafka follower gets ~5 records per 10 ms
fetch at 500 orders/s), beside the same records handed out all at once. Per setting: the
loop thread's CPU per order (its own CPU clock) and the process's (the DuckDB flusher
included). The difference between the rows is what the pacing costs: the node's own work per
poll, and apply on caches other processes used while the loop slept.

    .venv/bin/python bench/follower_loop.py               # 5 x 10 ms, 10 x 20 ms, all at once
    .venv/bin/python bench/follower_loop.py --quick       # fewer orders (noisy)
    .venv/bin/python bench/follower_loop.py --arrival     # records arriving at 500/s, fetched
                                                          # every 10 ms (as from Kafka), the
                                                          # loop lingering 0 and 20 ms

With ``--arrival`` the reader is Kafka-like: the measured records arrive at ``arrival_rate``
per second, a fetch every ``fetch_ms`` takes what arrived, and a poll returns what was fetched
(or waits for the next fetch); the follower's ``replog.node.follower_linger_s`` is set per
row, so the rows compare what its linger does at the same arrivals.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed, feed_parser  # noqa: E402
from bench.harness import Report, spread  # noqa: E402
from replog import node as node_module  # noqa: E402
from replog.entry import Entry  # noqa: E402
from replog.node import Node  # noqa: E402
from replog.testing.memlog import ManualElection  # noqa: E402
from runner import gcpolicy  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

# (records per poll, ms before each; 0 records: all at once): a follower at 500 orders/s
# with a 10 ms fetch wait (today's), with a 20 ms one, and the bound of batching
SETTINGS = ((5, 10.0), (10, 20.0), (0, 0.0))
confirm_every_orders = 50  # a node's EffectsDone every 100 ms at 500 orders/s
applied_timeout_s = 600.0


class PacedReader:
    """Hands out the feed: everything before ``measured_from`` at once, then (once ``go`` is
    set) ``per_wake`` records per poll after sleeping ``gap_s`` (``per_wake`` 0: the rest)."""

    def __init__(self, records: list[tuple[int, bytes]], start: int, measured_from: int,
                 per_wake: int, gap_s: float, go: threading.Event) -> None:
        self.records, self.at, self.measured_from = records, start, measured_from
        self.per_wake, self.gap_s, self.go = per_wake, gap_s, go

    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        if self.at >= len(self.records):
            time.sleep(timeout_s)
            return []
        if self.at < self.measured_from:
            end = self.measured_from
        else:
            if not self.go.is_set():
                self.go.wait(timeout_s)
                return []
            if self.gap_s:
                time.sleep(self.gap_s)
            end = len(self.records) if not self.per_wake else self.at + self.per_wake
        out = self.records[self.at:end]
        self.at += len(out)
        return out

    def seek(self, offset: int) -> None:
        self.at = offset

    def pause(self) -> None:
        pass

    def close(self) -> None:
        pass


arrival_rate = 500.0  # records per second (--arrival)
fetch_ms = 10.0  # a follower's fetch wait (replog.kafka.follower_fetch_wait_max_ms)
LINGERS_MS = (0.0, 20.0)  # --arrival rows: replog.node.follower_linger_s in ms


class FetchingReader(PacedReader):
    """Hands out everything before ``measured_from`` at once, then (once ``go`` is set) the
    records that arrived at ``arrival_rate`` by the last ``fetch_ms`` boundary, waiting for
    the next boundary when none is fetched yet (a Kafka reader's local queue)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.t0: float | None = None

    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        if self.at >= len(self.records) or self.at < self.measured_from:
            return super().poll(timeout_s, records_max)
        if not self.go.is_set():
            self.go.wait(timeout_s)
            return []
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        fetch_s = fetch_ms / 1000
        fetches = (now - self.t0) // fetch_s  # whole fetches so far
        end = self.measured_from + int(fetches * fetch_ms * arrival_rate / 1000)
        if end <= self.at:  # nothing fetched yet: wait for the next fetch
            time.sleep(max(0.0, min(timeout_s, self.t0 + (fetches + 1) * fetch_s - now)))
            fetches = (time.monotonic() - self.t0) // fetch_s
            end = self.measured_from + int(fetches * fetch_ms * arrival_rate / 1000)
        out = self.records[self.at:min(end, len(self.records), self.at + records_max)]
        self.at += len(out)
        return out


class MemoryLog:
    def __init__(self, make_reader) -> None:
        self._make_reader = make_reader

    def first_offset(self) -> int:
        return 0

    def tail_offset(self) -> int:
        return 0

    def open_reader(self, start: int, *, follower: bool = False) -> PacedReader:
        return self._make_reader(start)

    def append(self, records):  # a follower never appends
        raise RuntimeError("a follower does not append")

    def close(self) -> None:
        pass


def records_of(feed) -> list[tuple[int, bytes]]:
    """The feed's records as a leader writes them: a node fences by (writer id, seq), so each
    its own seq (``bench/apply_cost.py`` applies them directly, with seq 0)."""
    return [(offset, dataclasses.replace(Entry.decode(raw, offset), seq=offset + 1).encode())
            for offset, raw in feed.records]


def run(records: list[tuple[int, bytes]], measured_from: int, orders: int, per_wake: int,
        gap_ms: float, arriving: bool = False) -> tuple[float, float]:
    """(loop thread CPU µs per order, process CPU µs per order) over the measured records."""
    scratch = Path(tempfile.mkdtemp(prefix="railflow-follower-loop-"))
    sm = RunnerStateMachine(scratch / "node")
    go = threading.Event()
    reader = FetchingReader if arriving else PacedReader
    log = MemoryLog(lambda start: reader(records, start, measured_from, per_wake,
                                         gap_ms / 1000, go))
    node = Node(sm, log, ManualElection({"leader": "http://leader"}), node_id="follower",
                advertise_url="http://follower", on_effects=lambda entry, effects: None)
    node.start()

    def wait_applied(offset: int) -> None:
        deadline = time.monotonic() + applied_timeout_s
        while node.applied_offset < offset:
            if node.failure is not None:
                raise RuntimeError(f"the follower stopped: {node.failure!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"offset {offset} not applied in {applied_timeout_s} s")
            time.sleep(0.01)

    try:
        wait_applied(measured_from - 1)
        sm.flush()
        gcpolicy.settle()
        loop = next(t for t in threading.enumerate() if t.name.startswith("replog-loop"))
        clock = time.pthread_getcpuclockid(loop.ident)
        thread0, cpu0 = time.clock_gettime_ns(clock), time.process_time_ns()
        go.set()
        wait_applied(len(records) - 1)
        thread = time.clock_gettime_ns(clock) - thread0
        sm.flush()
        cpu = time.process_time_ns() - cpu0
        return thread / orders / 1000, cpu / orders / 1000
    finally:
        node.stop()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    ap = feed_parser(__doc__.splitlines()[0])
    ap.add_argument("--arrival", action="store_true",
                    help=f"records arriving at {arrival_rate:g}/s, fetched every {fetch_ms:g} "
                         f"ms, the follower lingering {' and '.join(map(str, LINGERS_MS))} ms")
    args = ap.parse_args()
    gcpolicy.for_serving()
    orders = args.orders or (3_000 if args.quick else 10_000)
    repeats = args.repeats or (1 if args.quick else 3)
    feed, measured_from, _ = build_feed(orders, args.seed, confirm_every=confirm_every_orders)
    records = records_of(feed)
    report = Report("follower_loop_arrival" if args.arrival else "follower_loop", args.quick)
    if args.arrival:
        for linger_ms in LINGERS_MS:
            node_module.follower_linger_s = linger_ms / 1000
            results = [run(records, measured_from, orders, 0, 0.0, arriving=True)
                       for _ in range(repeats)]
            report.add(what=f"{arrival_rate:g}/s fetched every {fetch_ms:g} ms, linger "
                            f"{linger_ms:g} ms", orders=orders, repeats=repeats,
                       loop_us_per_order=spread([t for t, _ in results]),
                       process_us_per_order=spread([c for _, c in results]))
        report.write(["what", "orders", "repeats", "loop_us_per_order", "process_us_per_order"])
        return
    node_module.follower_linger_s = 0.0  # these rows pace the wakeups themselves
    for per_wake, gap_ms in SETTINGS:
        results = [run(records, measured_from, orders, per_wake, gap_ms) for _ in range(repeats)]
        report.add(what=(f"{per_wake} records per poll, {gap_ms:g} ms apart" if per_wake
                         else "all records in one poll"), orders=orders, repeats=repeats,
                   loop_us_per_order=spread([t for t, _ in results]),
                   process_us_per_order=spread([c for _, c in results]))
    report.write(["what", "orders", "repeats", "loop_us_per_order", "process_us_per_order"])


if __name__ == "__main__":
    main()
