"""The leader's Python per order outside apply: an embedded node driven in-process, no HTTP.

``bench/profile_node.py`` samples a served node; its figure mixes the kernel's socket work,
hyper, the GIL hand-over and the load generator's pacing. This drives one embedded node
(file log, RocksDB run store, the W3 demo workflow) from a thread of its own through
``HotPath.serve_order`` with the native front's hand-off (``waits``: the node's apply loop
answers each order itself, as ``runner.api.native`` has it), at ``--rate`` orders a second,
and reads each thread's CPU from its own clock (``pthread_getcpuclockid``: nanoseconds, not
the kernel's 10 ms ticks). Apply is timed inside the loop (``--parts`` also times each hand-off
the loop makes per order), so the table says what the loop spends per order besides apply:

- ``front (serve_order)``: the driver thread, i.e. what the native front's Python costs per
  order (decode, bearer lookup, limits, the node's lock, the appender's wakeup), plus the
  driver's own pacing (~1-2 µs);
- ``replog-loop``: apply, then finish, settle, the answer (``_order_applied``), effects, the
  checkpointer's test, publish, expire, the wait for the appender;
- ``loop - apply``: the figure this bench is for.

    PYTHONPATH=. python bench/leader_loop.py                  # 5,000 orders at 1,000/s
    PYTHONPATH=. python bench/leader_loop.py --parts          # + each part of the loop
    PYTHONPATH=. python bench/leader_loop.py --repeats 3 --orders 4000
    PYTHONPATH=. python bench/leader_loop.py --burst 4       # orders arriving 4 at a time

Every figure is NOISY on a shared machine: compare builds interleaved (A B B A).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

warmup_orders = 2_000
ready_timeout_s = 60.0


def thread_clock(ident: int) -> int:
    return time.pthread_getcpuclockid(ident)


def cpu_ns(clock: int) -> int:
    return time.clock_gettime_ns(clock)


class Timed:
    """Wraps a callable; adds its thread CPU per call to ``ns`` (the wrapper's own ~0.3 µs
    per call is in it)."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.ns = 0
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return self.fn(*args)
        finally:
            self.ns += time.thread_time_ns() - t0
            self.calls += 1

    def reset(self) -> None:
        self.ns = self.calls = 0


def start_node(data_dir: Path) -> tuple[Any, Any, str]:
    os.environ.update(RAILFLOW_MODE="embedded", RAILFLOW_DATA_DIR=str(data_dir),
                      RAILFLOW_PORT="1")
    from runner import gcpolicy
    from runner.api.hot import HotPath
    from runner.cli import demo_credentials
    from runner.service import Service
    from runner.settings import Settings

    settings = Settings()
    gcpolicy.for_serving(settings.gil_switch_ms, freeze_survivors=settings.gc_freeze_survivors,
                         full_every=settings.gc_full_every_s)
    service = Service(settings)
    key, _, _ = demo_credentials(settings.data_dir, service.auth)
    service.start()
    if not service.wait_workflows(ready_timeout_s):
        raise RuntimeError("the demo workflow was not published")
    gcpolicy.settle()
    return service, HotPath(None, service), key


def bodies(n: int, seed: int, tag: str) -> list[bytes]:
    from runner.demo import OrderGenerator

    gen = OrderGenerator(seed=seed)
    return [b'{"event_id":"ll-' + tag.encode() + b"-" + str(i).encode()
            + b'","type":"order","data":' + orjson.dumps(gen.order()["data"]) + b"}"
            for i in range(n)]


class Driver:
    """Serves ``bodies`` through ``serve_order`` at ``rate`` a second from its own thread;
    counts the answers (by status) on the loop thread that gives them."""

    def __init__(self, hot: Any, key: str, waits: Any) -> None:
        self.hot = hot
        self.auth = "Bearer " + key
        self.waits = waits
        self.statuses: dict[int, int] = {}
        self.answered = 0
        self.done = threading.Event()
        self.expect = 0
        self.first_body: bytes | None = None

    def answer(self, status: int, headers: list, body: bytes) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if self.first_body is None and status == 200:
            self.first_body = body
        self.answered += 1
        if self.answered >= self.expect:
            self.done.set()

    def run(self, items: list[bytes], rate: float, burst: int = 1) -> tuple[int, float]:
        """(driver thread CPU ns, wall s) for serving ``items``, ``burst`` at a time (back
        to back, every ``burst / rate`` s)."""
        self.answered, self.expect = 0, len(items)
        self.done.clear()
        out: list = []

        def drive() -> None:
            serve, auth, answer, waits = self.hot.serve_order, self.auth, self.answer, self.waits
            interval = 1.0 / rate
            t0 = time.thread_time_ns()
            start = time.monotonic()
            for i, body in enumerate(items):
                due = start + (i - i % burst) * interval
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                if not serve(None, auth, "application/json", body, answer, waits):
                    raise RuntimeError("serve_order declined an order")
            out.append(time.thread_time_ns() - t0)

        t = threading.Thread(target=drive, name="bench-front")
        wall0 = time.monotonic()
        t.start()
        t.join()
        if not self.done.wait(30):
            raise RuntimeError(f"only {self.answered} of {len(items)} answered")
        return out[0], time.monotonic() - wall0


def threads_by_name() -> dict[str, int]:
    return {t.name: t.ident for t in threading.enumerate() if t.ident is not None}


def measure(service: Any, driver: Driver, items: list[bytes], rate: float,
            parts: dict[str, Timed], burst: int = 1) -> dict[str, float]:
    names = threads_by_name()
    loop = next(i for n, i in names.items() if n.startswith("replog-loop"))
    watched = {"replog-loop": loop}
    for n, i in names.items():
        if n.startswith("replog-appender") or n in ("effects-store", "duckdb-flush"):
            watched[n.split("-node")[0]] = i
    clocks = {n: thread_clock(i) for n, i in watched.items()}
    before = {n: cpu_ns(c) for n, c in clocks.items()}
    for p in parts.values():
        p.reset()
    front_ns, wall = driver.run(items, rate, burst)
    time.sleep(0.3)  # the writer's and the flusher's work of the last orders
    after = {n: cpu_ns(c) for n, c in clocks.items()}
    n = len(items)
    row = {"front (serve_order)": front_ns / n / 1000}
    row.update({k: (after[k] - before[k]) / n / 1000 for k in clocks})
    for name, p in parts.items():
        row[name] = p.ns / n / 1000
    row["loop - apply"] = row["replog-loop"] - row["apply"]
    row["wall s"] = wall
    return row


def instrument(service: Any, hot: Any, all_parts: bool) -> dict[str, Timed]:
    node = service.node
    parts = {"apply": Timed(service.sm.apply)}
    service.sm.apply = parts["apply"]
    if all_parts:
        parts["answer (_order_applied)"] = Timed(hot._order_applied)
        hot._order_applied = parts["answer (_order_applied)"]
        parts["on_effects"] = Timed(node.on_effects)
        node.on_effects = parts["on_effects"]
        parts["checkpointer"] = Timed(node.checkpointer.maybe_checkpoint)
        node.checkpointer = _Checkpointer(parts["checkpointer"])
        parts["_process"] = Timed(node._process)
        node._process = parts["_process"]
    return parts


class _Checkpointer:
    def __init__(self, fn: Callable) -> None:
        self.maybe_checkpoint = fn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=5_000)
    ap.add_argument("--rate", type=float, default=1_000.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--parts", action="store_true", help="time each part of the loop too")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--burst", type=int, default=1,
                    help="orders arriving together (same rate): what the loop saves when it "
                         "applies more than one per wakeup")
    args = ap.parse_args(argv)

    import asyncio

    data_dir = Path(tempfile.mkdtemp(prefix="railflow-leader-loop-"))
    waits = asyncio.new_event_loop()
    threading.Thread(target=waits.run_forever, name="waits", daemon=True).start()
    service = None
    try:
        service, hot, key = start_node(data_dir)
        parts = instrument(service, hot, args.parts)
        driver = Driver(hot, key, waits)
        tag = f"{os.getpid()}"
        driver.run(bodies(warmup_orders, args.seed + 1, tag + "w"), args.rate)
        rows = []
        for r in range(args.repeats):
            items = bodies(args.orders, args.seed + 10 + r, f"{tag}r{r}")
            rows.append(measure(service, driver, items, args.rate, parts, args.burst))
        print(f"statuses: {driver.statuses}")
        print(f"µs of thread CPU per order, {args.orders} orders at {args.rate:.0f}/s "
              f"({args.burst} at a time), "
              f"{args.repeats} repeat(s) (NOISY):")
        for k in rows[0]:
            vals = [row[k] for row in rows]
            print(f"  {k:28s} " + "  ".join(f"{v:8.1f}" for v in vals)
                  + (f"   median {statistics.median(vals):8.1f}" if len(vals) > 1 else ""))
    finally:
        if service is not None:
            service.stop()
        waits.call_soon_threadsafe(waits.stop)
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
