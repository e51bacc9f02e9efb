"""The checkpoint's write off the apply thread, in-process: its CPU per run held, full
against delta (or old dump against new), P1's worst seconds.

Every node writes a checkpoint every 20,000 entries: its checkpoint thread dumps the DuckDB
tables to Parquet, writes the metrics engine's files, hashes the parts and uploads them. The
tables hold every run of the last hour (``run_retention_ms``), so a full write's cost grows with
the state; a delta (``checkpoints.chain``) dumps only the rows of the keys changed since the
previous capture, and names the engine's rolled segments its base holds.

This applies W3 orders (``bench/apply_cost.py``'s feed) through the real state machine, then
takes checkpoints into a local store with the real ``Checkpointer``, ``--gap`` entries apart,
alternating two kinds of write, A B B A per round:

- ``--ab delta`` (the default): ``full`` (``full_every = 0``) against ``delta`` (on the
  checkpoint just before), at two state sizes (``--orders`` and ``--orders2`` orders held
  before the rounds): a delta's cost should not grow with the state;
- ``--ab dump``: a full write's dump ``old`` (sorted by key, snappy) against ``new`` (scan
  order, zstd level 1: the default).

Per write: the process's CPU from the capture's return to the upload's end (only the
checkpoint thread runs then), the wall time, the bytes uploaded, and CPU per 1,000 runs held.
The target projects the new / delta write's CPU onto a P1 row: 1,000 orders/s, a checkpoint
every 20 s, 150,000 runs held on average over a 5-minute row; a node's checkpoint writes must
stay under 5 % of a core. (A delta's CPU is per write, not per run held: it is projected as
it is.)

    .venv/bin/python bench/checkpoint_write.py            # 30,000 and 90,000 orders, 1 round
    .venv/bin/python bench/checkpoint_write.py --quick    # 10,000 and 30,000 orders, 1 round
    .venv/bin/python bench/checkpoint_write.py --ab dump  # the dump A/B at --orders
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed  # noqa: E402
from bench.checkpoint_common import (  # noqa: E402
    apply_entries,
    apply_orders,
    orders_applied,
    parser,
)
from bench.harness import Report  # noqa: E402
from checkpoints import Checkpointer, store_from_url  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.state import snapshot  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

P1_RUNS_HELD_MEAN = 150_000  # 1,000 orders/s over a 5-minute row, one run each
P1_CHECKPOINT_EVERY_S = 20.0  # every 20,000 entries at ~1,000 entries/s
SHARE_TARGET = 0.05  # of one core, per node
DUMPS = {"old": (True, "COMPRESSION snappy"), "new": (False, snapshot.DUMP_COMPRESSION)}
KINDS = {"full": 0, "delta": 1000}  # the checkpointer's full_every
COLUMNS = ["size", "write", "writes", "runs_held", "cpu_ms_p50", "wall_ms_p50", "mb_p50",
           "cpu_ms_per_1000_runs", "p1_core_share", "cpus", "mbs"]


def main() -> None:
    ap = parser(__doc__, orders_help="orders before the first round", rounds_default=1,
                rounds_help="rounds of A B B A per state size", gap_default=20_000,
                gap_help="entries between two checkpoints")
    ap.add_argument("--ab", choices=("delta", "dump"), default="delta")
    ap.add_argument("--orders2", type=int, default=None,
                    help="orders held before the second state size's rounds (--ab delta)")
    args = ap.parse_args()
    orders = args.orders or (10_000 if args.quick else 30_000)
    orders2 = args.orders2 or 3 * orders
    a, b = ("full", "delta") if args.ab == "delta" else ("old", "new")
    modes = [a, b, b, a] * args.rounds
    sizes = [orders, orders2] if args.ab == "delta" else [orders]
    # ~1.1 entries an order: enough orders for every gap and both sizes
    total = sizes[-1] + (len(sizes) * (len(modes) + 1) * args.gap) * 10 // 11 + 1000
    feed, first, _ = build_feed(total, args.seed)
    records = feed.records
    scratch = Path(tempfile.mkdtemp(prefix="railflow-ckpt-write-"))
    sm = RunnerStateMachine(scratch / "node")
    cp = Checkpointer(store_from_url((scratch / "store").as_uri()), sm, every_entries=10**9,
                      retain=2, scratch_root=scratch, background_nice=None)
    samples: dict[tuple[int, str], dict[str, list[float]]] = {}
    try:
        for offset, raw in records[:first]:  # setup and warm-up
            sm.apply(Entry.decode(raw, offset))
        cursor = first
        for size in sizes:
            cursor = apply_orders(sm, records, cursor, size - orders_applied(sm))
            _write(cp, sm, "full")  # the base of the first delta
            for mode in modes:
                cursor = apply_entries(sm, records, cursor, args.gap)
                sm.flush()
                runs = sm.con.execute("SELECT count(*) FROM runs").fetchone()[0]
                cpu, wall = _write(cp, sm, mode)
                s = samples.setdefault((size, mode), {"cpu": [], "wall": [], "bytes": [],
                                                      "runs": []})
                s["cpu"].append(cpu)
                s["wall"].append(wall)
                s["bytes"].append(cp.stats.last_bytes)
                s["runs"].append(runs)
    finally:
        snapshot.DUMP_SORTED, snapshot.DUMP_COMPRESSION = DUMPS["new"]
        cp.close()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    _report(args, samples, sizes, a, b)


def _write(cp: Checkpointer, sm: RunnerStateMachine, mode: str) -> tuple[float, float]:
    """One checkpoint of kind ``mode``; its CPU and wall ms from the capture's return."""
    if mode in DUMPS:
        snapshot.DUMP_SORTED, snapshot.DUMP_COMPRESSION = DUMPS[mode]
        cp.full_every = 0
    else:
        cp.full_every = KINDS[mode]
    cp.checkpoint(sm.applied_offset, 1)
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    cp.wait()  # nothing but the checkpoint thread runs meanwhile
    cpu, wall = time.process_time_ns() - cpu0, time.perf_counter_ns() - wall0
    if cp.stats.failed:
        raise SystemExit(f"checkpoint at {sm.applied_offset} ({mode}) failed: see the log")
    if (cp.stats.last_delta_base is not None) != (mode == "delta"):
        raise SystemExit(f"checkpoint at {sm.applied_offset} was not a {mode} one")
    return cpu / 1e6, wall / 1e6


def _report(args: argparse.Namespace, samples: dict, sizes: list[int], a: str, b: str) -> None:
    report = Report("checkpoint_write", args.quick)
    cpu_p50 = {}
    for (size, mode), s in samples.items():
        per_kruns = statistics.median(
            c / r * 1000 for c, r in zip(s["cpu"], s["runs"], strict=True))
        cpu_p50[size, mode] = statistics.median(s["cpu"])
        share = (cpu_p50[size, mode] / 1000 if mode == "delta"
                 else per_kruns * P1_RUNS_HELD_MEAN / 1000 / 1000) / P1_CHECKPOINT_EVERY_S
        report.add(size=size, write=mode, writes=len(s["cpu"]),
                   runs_held=int(statistics.median(s["runs"])),
                   cpu_ms_p50=round(cpu_p50[size, mode], 1),
                   wall_ms_p50=round(statistics.median(s["wall"]), 1),
                   mb_p50=round(statistics.median(s["bytes"]) / 1e6, 2),
                   cpu_ms_per_1000_runs=round(per_kruns, 2), p1_core_share=round(share, 4),
                   cpus=[round(v) for v in s["cpu"]],
                   mbs=[round(v / 1e6, 2) for v in s["bytes"]])
    small, large = sizes[0], sizes[-1]
    note = (f"{b} / {a} CPU {cpu_p50[large, b] / cpu_p50[large, a]:.2f} at {large:,} orders"
            + (f"; {b} at {large:,} / at {small:,} orders "
               f"{cpu_p50[large, b] / cpu_p50[small, b]:.2f}, {a} "
               f"{cpu_p50[large, a] / cpu_p50[small, a]:.2f}" if large != small else "")
            + f"; {args.gap:,} entries between writes; load {os.getloadavg()[0]:.1f} at the end")
    s = samples[large, b]
    if b == "delta":
        share = cpu_p50[large, b] / 1000 / P1_CHECKPOINT_EVERY_S
    else:
        share = statistics.median(c / r for c, r in zip(s["cpu"], s["runs"], strict=True)) \
            * P1_RUNS_HELD_MEAN / 1000 / P1_CHECKPOINT_EVERY_S
    report.target("p1_checkpoint_core_share", share, "core", SHARE_TARGET,
                  higher_is_better=False, note=note)
    report.write(COLUMNS)


if __name__ == "__main__":
    main()
