"""Apply on cold caches: the memory an order's apply touches, timed and counted.

A follower applies a few records per wakeup, each on caches other processes used meanwhile,
so its apply costs what apply on cold caches costs (``docs/cpu-per-order.md``). This applies
``bench/apply_cost.py``'s feed (W1 metrics, W3 built-in scorer, the serving collector) and
measures each record's decode + apply on the apply thread's CPU clock in three conditions,
in blocks of records taking turns: back to back, after a sleep, and after a pass that
rewrites a buffer larger than the last-level cache (``--evict-mb``).

Timings move with the machine's load (NOISY). The deterministic measure is ``--callgrind``:
run under ``valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no
--toggle-collect='*starmap_next*'`` (``run_callgrind`` below does it), each record is applied
inside ``itertools.starmap`` (collection is on there only) after the eviction pass, so the
simulated cache misses per order (D1 and LL, data and instructions) are the lines an order's
apply touches, and the calls of the allocator are the blocks it allocates.

    .venv/bin/python bench/apply_cold.py                     # timings, 3 x 1,000 records each
    .venv/bin/python bench/apply_cold.py --count             # callgrind: misses, allocations
    .venv/bin/python bench/apply_cold.py --count --orders 300 --raw /tmp/cg.out
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from itertools import starmap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import apply_cost  # noqa: E402
from bench.apply_cost import build_feed  # noqa: E402
from bench.harness import spread  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner import gcpolicy  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

# Python's allocation entry points: thin wrappers of 5 instructions a call (CPython 3.11,
# x86-64: measured as self Ir / calls over a whole process), so their self cost counts calls
ALLOCATORS = ("PyObject_Malloc", "PyMem_Malloc", "PyObject_Calloc")
WRAPPER_IR = 5
# This machine's caches (valgrind reads the VM's LL as 256 MB direct-mapped): 32 KB L1s and the
# 32 MB L3 as the last level (callgrind simulates two levels)
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64")
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


class Evictor:
    """Rewrites ``mb`` megabytes in place: what other processes do to the caches meanwhile."""

    def __init__(self, mb: int) -> None:
        self.size = mb << 20
        self.buf = ctypes.create_string_buffer(self.size)
        self.n = 0

    def __call__(self) -> None:
        self.n += 1
        ctypes.memset(self.buf, self.n & 0xFF, self.size)


def _machine(feed, measured_from: int) -> tuple[RunnerStateMachine, Path]:
    scratch = Path(tempfile.mkdtemp(prefix="railflow-apply-cold-"))
    sm = RunnerStateMachine(scratch / "node")
    for offset, raw in feed.records[:measured_from]:
        sm.apply(Entry.decode(raw, offset))
    sm.flush()
    gcpolicy.settle()
    return sm, scratch


def timings(feed, measured_from: int, records: int, rounds: int, pause_ms: float,
            evict_mb: int) -> dict[str, list[float]]:
    """µs of apply-thread CPU per order, per condition and round (NOISY)."""
    sm, scratch = _machine(feed, measured_from)
    evict = Evictor(evict_mb)
    clock = time.thread_time_ns
    conditions = ("back to back", f"after {pause_ms:g} ms asleep", f"after {evict_mb} MB evicted")
    out: dict[str, list[float]] = {c: [] for c in conditions}
    records_left = feed.records[measured_from:]
    try:
        at = 0
        for _ in range(rounds):
            spent = dict.fromkeys(conditions, 0)
            orders = dict.fromkeys(conditions, 0)
            for c in conditions:  # a block of records per condition, in turn
                for _ in range(records):
                    offset, raw = records_left[at]
                    at += 1
                    if c is conditions[1]:
                        time.sleep(pause_ms / 1000)
                    elif c is conditions[2]:
                        evict()
                    t0 = clock()
                    sm.apply(Entry.decode(raw, offset))
                    spent[c] += clock() - t0
                    orders[c] += b"EventReceived" in raw[:64]
            for c in conditions:
                out[c].append(spent[c] / max(1, orders[c]) / 1000)
        sm.flush()
    finally:
        gc.unfreeze()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def counted(feed, measured_from: int, records: int, evict_mb: int) -> int:
    """Apply ``records`` records, each inside ``starmap`` after an eviction pass (the part
    callgrind collects); returns the orders among them."""
    sm, scratch = _machine(feed, measured_from)
    evict = Evictor(evict_mb)
    decode = Entry.decode
    apply = sm.apply

    def one(offset: int, raw: bytes) -> None:
        apply(decode(raw, offset))

    measured = feed.records[measured_from:measured_from + records]
    try:
        for item in measured:
            if evict_mb:
                evict()
            deque(starmap(one, (item,)), maxlen=0)
        sm.flush()
    finally:
        gc.unfreeze()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return sum(b"EventReceived" in raw[:64] for _, raw in measured)


def calls(feed, measured_from: int, records: int) -> tuple[int, dict[str, list[int]]]:
    """Python and C function calls made by applying ``records`` records (``sys.setprofile``:
    deterministic), by the module of the function called: (orders, module -> [Python calls,
    distinct Python functions, C calls]). Every Python function an order runs is code and
    data (its code object, bytecode, constants, frame) that a cold cache fetches again."""
    sm, scratch = _machine(feed, measured_from)
    by_module: dict[str, list] = {}
    seen_code: set = set()

    def hook(frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            row = by_module.setdefault(Path(code.co_filename).stem, [0, 0, 0])
            row[0] += 1
            if code not in seen_code:
                seen_code.add(code)
                row[1] += 1
        elif event == "c_call":
            module = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)
                                                              ).__name__
            by_module.setdefault(f"C {module}", [0, 0, 0])[2] += 1

    measured = feed.records[measured_from:measured_from + records]
    decode = Entry.decode
    apply = sm.apply
    try:
        sys.setprofile(hook)
        for offset, raw in measured:
            apply(decode(raw, offset))
        sys.setprofile(None)
        sm.flush()
    finally:
        sys.setprofile(None)
        gc.unfreeze()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return sum(b"EventReceived" in raw[:64] for _, raw in measured), by_module


def parse_callgrind(path: Path) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(the totals of each event, each function's self cost by event) of a callgrind output
    file. Only costs are gated by ``--toggle-collect``: its call counts are the whole
    process's, so allocations are counted from the allocator wrappers' self cost."""
    names: dict[str, str] = {}
    events: list[str] = []
    totals: dict[str, int] = {}
    self_cost: dict[str, dict[str, int]] = {}
    fn = ob = ""
    skip_next = False
    objects: dict[str, str] = {}  # function -> its object file
    obnames: dict[str, str] = {}

    def resolved(ref: str, known: dict[str, str]) -> str:
        """A compressed name ("(12) name" defines id 12, "(12)" refers to it)."""
        m = re.match(r"\((\d+)\)(?: (.*))?", ref)
        if m is None:
            return ref
        if m.group(2) is not None:
            known[m.group(1)] = m.group(2)
        return known.get(m.group(1), ref)

    def obname(ref: str) -> str:
        return resolved(ref, obnames)

    def name(ref: str) -> str:
        return resolved(ref, names)

    with open(path) as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                if skip_next:  # a call's inclusive cost
                    skip_next = False
                    continue
                costs = self_cost.setdefault(fn, {})
                for e, v in zip(events, line.split()[1:], strict=False):
                    costs[e] = costs.get(e, 0) + int(v)
            elif line.startswith("calls="):
                skip_next = True
            elif line.startswith("fn="):
                fn = name(line[3:].strip())
                if fn not in objects:
                    objects[fn] = ob
            elif line.startswith("ob="):
                ob = Path(obname(line[3:].strip())).name
            elif line.startswith(("cfn=", "cob=", "cfi=", "cfl=", "fl=", "fi=", "fe=")):
                if line.startswith("cfn="):
                    name(line[4:].strip())
                elif line.startswith("cob="):
                    obname(line[4:].strip())
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                totals = dict(zip(events, map(int, line.split()[1:]), strict=False))
    by_object: dict[str, dict[str, int]] = {}
    for f, costs in self_cost.items():
        into = by_object.setdefault(objects.get(f, "?"), {})
        for e, v in costs.items():
            into[e] = into.get(e, 0) + v
    self_cost.update({f"[{o}]": c for o, c in by_object.items()})
    return totals, self_cost


def run_callgrind(args: argparse.Namespace) -> None:
    out = Path(args.raw or tempfile.mktemp(prefix="railflow-apply-cold-", suffix=".cg"))
    cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", *CACHES, "--collect-atstart=no",
           "--toggle-collect=*starmap_next*", f"--callgrind-out-file={out}",
           sys.executable, __file__, "--inner", "--orders", str(args.orders),
           "--evict-mb", str(args.evict_mb), "--seed", str(args.seed)]
    if args.parse:  # an earlier run's output
        out, orders = Path(args.parse), args.parse_orders
    else:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        orders = int(re.search(r"orders measured: (\d+)", done.stdout).group(1))
    totals, self_cost = parse_callgrind(out)
    print(f"per order ({orders} orders, {args.orders} records, each after {args.evict_mb} MB "
          "evicted; callgrind, deterministic):")
    for e in EVENTS:
        if e in totals:
            print(f"  {e:5} {totals[e] / orders:12,.0f}")
    allocs = sum(self_cost.get(f, {}).get("Ir", 0) for f in ALLOCATORS) / WRAPPER_IR
    print(f"  Python allocations {allocs / orders:,.0f} (PyObject_Malloc, PyMem_Malloc, "
          "PyObject_Calloc calls)")
    objects = {f: c for f, c in self_cost.items() if f.startswith("[")}
    print("  by object file (per order):  ILmr    DLmr    DLmw      Ir")
    for f, c in sorted(objects.items(), key=lambda kv: -sum(kv[1].get(e, 0) for e in
                                                          ("ILmr", "DLmr", "DLmw")))[:8]:
        print(f"    {f[1:-1][:28]:28} {c.get('ILmr', 0) / orders:7,.0f} "
              f"{c.get('DLmr', 0) / orders:7,.0f} {c.get('DLmw', 0) / orders:7,.0f} "
              f"{c.get('Ir', 0) / orders:9,.0f}")
    for e in ("DLmr", "DLmw", "ILmr"):
        print(f"  {e} by function (per order):")
        ranked = sorted(((f, c) for f, c in self_cost.items() if not f.startswith("[")),
                        key=lambda kv: -kv[1].get(e, 0))[:args.top]
        for f, costs in ranked:
            print(f"    {costs.get(e, 0) / orders:8,.1f}  {f[:100]}")
    if not args.raw and not args.parse:
        out.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=None,
                    help="records measured (timings: per condition and round)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pause-ms", type=float, default=2.0)
    ap.add_argument("--evict-mb", type=int, default=None,
                    help="rewritten before each record (default 16; with --count 48, past the LL)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", action="store_true", help="run under callgrind: misses, allocations")
    ap.add_argument("--raw", help="with --count: keep callgrind's output file here")
    ap.add_argument("--top", type=int, default=12, help="with --count: allocating functions shown")
    ap.add_argument("--calls", action="store_true",
                    help="Python and C calls per order by module (sys.setprofile)")
    ap.add_argument("--parse", help="with --count: report a kept callgrind output instead")
    ap.add_argument("--parse-orders", type=int, default=149, help="with --parse: its orders")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count:
        args.orders = args.orders or 150
        args.evict_mb = 48 if args.evict_mb is None else args.evict_mb
        run_callgrind(args)
        return
    gcpolicy.for_serving()
    args.evict_mb = 16 if args.evict_mb is None else args.evict_mb
    if args.inner:
        apply_cost.warmup_orders = 1_000  # under valgrind: fewer, still windows of minutes
        feed, measured_from, _ = build_feed(args.orders, args.seed)
        print(f"orders measured: {counted(feed, measured_from, args.orders, args.evict_mb)}")
        return
    records = args.orders or 1_000
    if args.calls:
        feed, measured_from, _ = build_feed(records, args.seed)
        orders, by_module = calls(feed, measured_from, records)
        total = [sum(r[i] for r in by_module.values()) for i in range(3)]
        print(f"per order ({orders} orders; deterministic): {total[0] / orders:.1f} Python "
              f"calls, {total[1]} distinct Python functions in all, {total[2] / orders:.1f} "
              "C calls; by module (calls per order, functions, C calls per order):")
        for module, (py, funcs, c) in sorted(by_module.items(), key=lambda kv: -kv[1][0]
                                             - kv[1][2]):
            print(f"  {module:28} {py / orders:7.1f} {funcs:5} {c / orders:7.1f}")
        return
    feed, measured_from, _ = build_feed(records * 3 * args.rounds + 100, args.seed)
    result = timings(feed, measured_from, records, args.rounds, args.pause_ms, args.evict_mb)
    print(f"µs of apply-thread CPU per order (decode + apply), {args.rounds} rounds of "
          f"{records} records per condition, interleaved (NOISY):")
    for c, values in result.items():
        s = spread(values)
        print(f"  {c:28} median {s['median']:6.1f}  [{s['min']:.1f}..{s['max']:.1f}]")


if __name__ == "__main__":
    main()
