"""The checkpoint's write off the apply thread, in-process: its CPU per run held, old dump
against new (P1's worst seconds).

Every node writes a checkpoint every 20,000 entries: its checkpoint thread dumps every DuckDB
table to Parquet, writes the metrics engine's files, hashes the parts and uploads them. The
tables hold every run of the last hour (``run_retention_ms``), so a write's cost grows with the
state, and all three nodes write at the same offsets. In a 5-minute P1 row this was ~0.17 of a
core in bursts of 300-420 ms of CPU per second per node (``docs/latency.md``).

This applies W3 orders (``bench/apply_cost.py``'s feed) through the real state machine, then
takes checkpoints into a local store with the real ``Checkpointer``, alternating two dumps of
the tables, A B B A per round:

- ``old``: sorted by key, snappy (``runner.state.snapshot.DUMP_SORTED = True``);
- ``new``: in scan order, zstd level 1 (the default).

``--gap`` more orders are applied between two checkpoints. Per dump: the process's CPU from
the capture's return to the upload's end (only the checkpoint thread runs then), the wall
time, the bytes uploaded, and CPU per 1,000 runs held. The target projects that last figure
onto a P1 row: 1,000 orders/s, a checkpoint every 20 s, 150,000 runs held on average over a
5-minute row; a node's checkpoint writes must stay under 5 % of a core.

    .venv/bin/python bench/checkpoint_write.py            # 60,000 orders, 2 rounds
    .venv/bin/python bench/checkpoint_write.py --quick    # 15,000 orders, 1 round
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
from bench.checkpoint_pause import apply_orders  # noqa: E402
from bench.harness import Report  # noqa: E402
from checkpoints import Checkpointer, store_from_url  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.state import snapshot  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

P1_RUNS_HELD_MEAN = 150_000  # 1,000 orders/s over a 5-minute row, one run each
P1_CHECKPOINT_EVERY_S = 20.0  # every 20,000 entries at ~1,000 entries/s
SHARE_TARGET = 0.05  # of one core, per node
DUMPS = {"old": (True, "COMPRESSION snappy"), "new": (False, snapshot.DUMP_COMPRESSION)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--orders", type=int, default=None, help="orders before the first write")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of A B B A")
    ap.add_argument("--gap", type=int, default=500, help="orders between two checkpoints")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    orders = args.orders or (15_000 if args.quick else 60_000)
    rounds = args.rounds or (1 if args.quick else 2)
    modes = ["old", "new", "new", "old"] * rounds
    feed, first, _ = build_feed(orders + len(modes) * args.gap, args.seed)
    records = feed.records
    scratch = Path(tempfile.mkdtemp(prefix="railflow-ckpt-write-"))
    sm = RunnerStateMachine(scratch / "node")
    cp = Checkpointer(store_from_url((scratch / "store").as_uri()), sm, every_entries=10**9,
                      retain=2, scratch_root=scratch, background_nice=None)
    samples: dict[str, dict[str, list[float]]] = {
        m: {"cpu": [], "wall": [], "bytes": [], "runs": []} for m in DUMPS}
    try:
        cursor = first + orders
        for offset, raw in records[:cursor]:
            sm.apply(Entry.decode(raw, offset))
        for n, mode in enumerate(modes):
            if n:
                cursor = apply_orders(sm, records, cursor, args.gap)
            sm.flush()
            runs = sm.con.execute("SELECT count(*) FROM runs").fetchone()[0]
            snapshot.DUMP_SORTED, snapshot.DUMP_COMPRESSION = DUMPS[mode]
            cp.checkpoint(sm.applied_offset, 1)
            cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
            cp.wait()  # nothing but the checkpoint thread runs meanwhile
            cpu, wall = time.process_time_ns() - cpu0, time.perf_counter_ns() - wall0
            if cp.stats.failed:
                raise SystemExit(f"checkpoint {n} ({mode}) failed: see the log")
            s = samples[mode]
            s["cpu"].append(cpu / 1e6)
            s["wall"].append(wall / 1e6)
            s["bytes"].append(cp.stats.last_bytes)
            s["runs"].append(runs)
    finally:
        snapshot.DUMP_SORTED, snapshot.DUMP_COMPRESSION = DUMPS["new"]
        cp.close()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)

    report = Report("checkpoint_write", args.quick)
    per_kruns = {}
    for mode, s in samples.items():
        per_kruns[mode] = statistics.median(
            c / r * 1000 for c, r in zip(s["cpu"], s["runs"], strict=True))
        share = per_kruns[mode] * P1_RUNS_HELD_MEAN / 1000 / 1000 / P1_CHECKPOINT_EVERY_S
        report.add(dump=mode, writes=len(s["cpu"]), runs_held=int(statistics.median(s["runs"])),
                   cpu_ms_p50=round(statistics.median(s["cpu"]), 1),
                   wall_ms_p50=round(statistics.median(s["wall"]), 1),
                   mb_p50=round(statistics.median(s["bytes"]) / 1e6, 2),
                   cpu_ms_per_1000_runs=round(per_kruns[mode], 2),
                   p1_core_share=round(share, 3),
                   cpus=[round(v) for v in s["cpu"]])
    share = per_kruns["new"] * P1_RUNS_HELD_MEAN / 1000 / 1000 / P1_CHECKPOINT_EVERY_S
    report.target("p1_checkpoint_core_share", share, "core", SHARE_TARGET,
                  higher_is_better=False,
                  note=f"{orders} W3 orders held; new / old CPU per run "
                       f"{per_kruns['new'] / per_kruns['old']:.2f}; projected to "
                       f"{P1_RUNS_HELD_MEAN:,} runs every {P1_CHECKPOINT_EVERY_S:g} s; load "
                       f"{os.getloadavg()[0]:.1f} at the end")
    report.write(["dump", "writes", "runs_held", "cpu_ms_p50", "wall_ms_p50", "mb_p50",
                  "cpu_ms_per_1000_runs", "p1_core_share", "cpus"])


if __name__ == "__main__":
    main()
