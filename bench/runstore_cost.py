"""CPU per run of the leader's run-store writer (the ``effects-store`` thread), alone.

W3 orders go through the real state machine (``bench/apply_cost.py``'s feed); the ``StoreRun``
effects of each order are handed to a real ``EffectExecutor`` at a fixed rate of orders per
second, as the leader's loop does, and its writer thread lingers, batches and writes them to a
real store: the running cluster's HBase (through its Thrift server, a fresh table, dropped
afterwards) or RocksDB. The writer thread's CPU (user + system, from the kernel's
``schedstat``, ns) over the measured orders is divided by the runs written. The store's own
server (HBase's JVM) is not counted.

    .venv/bin/python bench/runstore_cost.py                     # hbase + rocksdb, 500 and 1,000/s
    .venv/bin/python bench/runstore_cost.py --stores hbase --rates 500 --orders 3000
    .venv/bin/python bench/runstore_cost.py --direct 50,100     # + put_many alone, per call size

``--direct`` also times ``put_many`` called on this thread with records already built, at the
given runs per call (no executor, no linger): the store's share alone.

Only the stores' public calls are used, so an older tree measures the same way:
``PYTHONPATH=/other/tree /other/tree/.venv/bin/python bench/runstore_cost.py``.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed  # noqa: E402
from bench.harness import Report, spread  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.executor import EffectExecutor  # noqa: E402
from runner.runstore.base import RunRecord  # noqa: E402
from runner.settings import Settings  # noqa: E402
from runner.state.effects import StoreRun  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402
from runner.telemetry import Telemetry  # noqa: E402

warmup_orders_store = 300  # handed over before the measured ones (connections, caches)
drain_timeout_s = 30


def store_effects(orders: int, seed: int) -> list[list[StoreRun]]:
    """The ``StoreRun`` effects of each measured W3 order (apply's own, in log order)."""
    feed, measured_from, _ = build_feed(orders, seed)
    scratch = Path(tempfile.mkdtemp(prefix="railflow-runstore-cost-"))
    sm = RunnerStateMachine(scratch / "node")
    per_order: list[list[StoreRun]] = []
    try:
        for i, (offset, raw) in enumerate(feed.records):
            entry = Entry.decode(raw, offset)
            effects = sm.apply(entry)
            if i >= measured_from and b"EventReceived" in raw[:64]:
                per_order.append([e for e in effects if isinstance(e, StoreRun)])
            elif i >= measured_from and per_order:  # a later entry's versions (an app's answer)
                per_order[-1] += [e for e in effects if isinstance(e, StoreRun)]
        sm.flush()
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return per_order


def thread_cpu_ns(native_id: int) -> int:
    """A thread's CPU time so far (user + system), from the kernel, in ns."""
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0])


class Counting:
    """The store, counting calls and runs (to report runs per call)."""

    def __init__(self, store) -> None:
        self.store = store
        self.calls = 0
        self.runs = 0

    def put_many(self, runs, writer_id=None):
        self.calls += 1
        self.runs += len(runs)
        self.store.put_many(runs, writer_id)

    def __getattr__(self, name):
        return getattr(self.store, name)


class Stores:
    """Opens each kind of store fresh, and removes it afterwards."""

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="railflow-runstore-"))
        self.tables: list[str] = []

    def open(self, kind: str):
        if kind == "rocksdb":
            from runner.runstore.rocks import RocksRunStore

            return RocksRunStore(self.scratch / uuid.uuid4().hex)
        from infra import endpoints
        from runner.runstore.hbase import HBaseRunStore

        table = f"runs_bench_{uuid.uuid4().hex[:12]}"
        self.tables.append(table)
        return HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT, table)

    def cleanup(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        if not self.tables:
            return
        import happybase

        from infra import endpoints

        conn = happybase.Connection(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT)
        try:
            for t in self.tables:
                conn.delete_table(t, disable=True)
        finally:
            conn.close()


def _drain(ex: EffectExecutor, runs: set[str]) -> None:
    deadline = time.monotonic() + drain_timeout_s
    while runs and time.monotonic() < deadline:
        for run_id, _ in (ex.take_confirmations() or {}).get("stored", []):
            runs.discard(run_id)
        time.sleep(0.005)
    if runs:
        raise RuntimeError(f"{len(runs)} runs not written within {drain_timeout_s} s")


def run_executor(store, per_order: list[list[StoreRun]], rate: float,
                 writer_id: int) -> tuple[float, float]:
    """(writer thread's CPU µs per run, runs per store call) with the orders' effects handed
    over at ``rate`` orders/s."""
    counting = Counting(store)
    scratch = Path(tempfile.mkdtemp(prefix="railflow-runstore-ex-"))
    before = set(threading.enumerate())  # an earlier executor's writer may still be stopping
    ex = EffectExecutor(Settings(data_dir=scratch), counting, lambda *a: None,
                        lambda v: None, Telemetry(), {}, {})
    try:
        writer = next(t for t in threading.enumerate()
                      if t.name == "effects-store" and t not in before)
        warm, measured = per_order[:warmup_orders_store], per_order[warmup_orders_store:]
        for effects in warm:
            ex.handle(None, effects, leader=True, writer_id=writer_id)
        _drain(ex, {e.run["run_id"] for effects in warm for e in effects})
        calls0, runs0 = counting.calls, counting.runs
        cpu0 = thread_cpu_ns(writer.native_id)
        start, interval = time.perf_counter(), 1.0 / rate
        for i, effects in enumerate(measured):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ex.handle(None, effects, leader=True, writer_id=writer_id)
        _drain(ex, {e.run["run_id"] for effects in measured for e in effects})
        cpu = thread_cpu_ns(writer.native_id) - cpu0
        runs, calls = counting.runs - runs0, counting.calls - calls0
        return cpu / runs / 1000, runs / max(1, calls)
    finally:
        ex.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run_direct(store, per_order: list[list[StoreRun]], runs_per_call: int,
               writer_id: int) -> float:
    """This thread's CPU µs per run of ``put_many`` alone, records built beforehand."""
    records = [RunRecord(**e.record) for effects in per_order for e in effects]
    store.put_many(records[:runs_per_call], writer_id)  # the connection, opened
    t0 = time.thread_time_ns()
    for at in range(runs_per_call, len(records), runs_per_call):
        store.put_many(records[at:at + runs_per_call], writer_id)
    return (time.thread_time_ns() - t0) / max(1, len(records) - runs_per_call) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=5_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--stores", default="hbase,rocksdb")
    ap.add_argument("--rates", default="500,1000", help="orders/s handed to the executor")
    ap.add_argument("--direct", default="", help="runs per call of put_many alone, e.g. 50,100")
    ap.add_argument("--quick", action="store_true", help="2,000 orders")
    args = ap.parse_args()
    orders = 2_000 if args.quick else args.orders
    per_order = store_effects(orders + warmup_orders_store, args.seed)
    runs = sum(len(e) for e in per_order[warmup_orders_store:])
    gc.collect()
    gc.freeze()  # the feed stays alive: keep the collector off it, as a node's frozen heap
    report = Report("runstore_cost", args.quick)
    stores = Stores()
    try:
        for kind in args.stores.split(","):
            for rate in [float(r) for r in args.rates.split(",") if r]:
                cpu, per_call = [], []
                for rep in range(args.repeats):
                    store = stores.open(kind)
                    try:
                        c, p = run_executor(store, per_order, rate, writer_id=rep + 1)
                    finally:
                        store.close()
                    cpu.append(c)
                    per_call.append(p)
                report.add(what=f"{kind}: executor's writer thread at {rate:.0f} orders/s",
                           runs=runs, repeats=args.repeats, runs_per_call=spread(per_call),
                           cpu_us_per_run=spread(cpu))
            for n in [int(x) for x in args.direct.split(",") if x]:
                cpu = []
                for rep in range(args.repeats):
                    store = stores.open(kind)
                    try:
                        cpu.append(run_direct(store, per_order, n, writer_id=rep + 1))
                    finally:
                        store.close()
                report.add(what=f"{kind}: put_many alone, {n} runs a call", runs=runs,
                           repeats=args.repeats, runs_per_call=n, cpu_us_per_run=spread(cpu))
    finally:
        stores.cleanup()
    report.write(["what", "runs", "repeats", "runs_per_call", "cpu_us_per_run"])


if __name__ == "__main__":
    main()
