"""The checkpoint's pause of the apply thread, in-process, old capture against new (P1's tail).

A node captures a checkpoint every 20,000 entries on its apply thread (``Checkpointer.
checkpoint`` -> ``StateMachine.snapshot()``); every order arriving meanwhile waits. This applies
W3 orders (W1's metrics, the built-in demo scorer; ``bench/apply_cost.py``'s feed) through the
real state machine, then takes checkpoints into a local store with the real ``Checkpointer``,
alternating three ways of taking the metrics engine's part:

- ``old``: its whole snapshot on the apply thread (its writer's barrier, segment links, open
  chunks, states and meta written there);
- ``dump``: ``Engine.capture`` with the native states encoded on the apply thread
  (``StreamCore.dump``; ``metrics_engine.engine.CAPTURE_FROZEN = False``);
- ``new``: ``Engine.capture`` with the states frozen (``StreamCore.freeze``: a copy of the held
  keys' states) and encoded on the checkpoint's writer thread without the GIL;

in the order A B C C B A per round. Between two checkpoints ``--gap`` more orders are applied,
so each capture meets freshly closed chunks in the writer's queue, as a node does.

Per mode: the apply thread's wall time and CPU time inside ``checkpoint`` (the pause), and,
after it, the native state's encoding (``StreamCore.dump``) and copy (``StreamCore.freeze``)
alone. NOISY on a shared machine: compare the modes of one run, not runs of different moments;
the CPU time moves less with the machine's load than the wall time.

    .venv/bin/python bench/checkpoint_pause.py             # 20,000 orders, 2 rounds
    .venv/bin/python bench/checkpoint_pause.py --quick     # 5,000 orders, 1 round

Target: the new capture's median pause <= 10 ms wall (P1's p99 at 1,000/s: a longer pause
sets the tail at every checkpoint).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed  # noqa: E402
from bench.checkpoint_common import apply_orders, parser  # noqa: E402
from bench.harness import Report  # noqa: E402
from checkpoints import Checkpointer, store_from_url  # noqa: E402
from metrics_engine import engine as metrics_engine  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.state import snapshot  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

PAUSE_TARGET_MS = 10.0


def main() -> None:
    args = parser(__doc__, orders_help="orders before the first capture", rounds_default=None,
                  rounds_help="rounds of A B B A", gap_default=1_000,
                  gap_help="orders between two checkpoints").parse_args()
    orders = args.orders or (5_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 2)
    modes = ["old", "dump", "new", "new", "dump", "old"] * rounds
    captures = len(modes)
    feed, first, _ = build_feed(orders + captures * args.gap, args.seed)
    records = feed.records
    scratch = Path(tempfile.mkdtemp(prefix="railflow-ckpt-pause-"))
    sm = RunnerStateMachine(scratch / "node")
    cp = Checkpointer(store_from_url((scratch / "store").as_uri()), sm, every_entries=10**9,
                      retain=2, scratch_root=scratch, background_nice=None)
    samples: dict[str, dict[str, list[float]]] = {
        m: {"wall": [], "cpu": [], "dump": [], "freeze": []} for m in ("old", "dump", "new")}
    try:
        cursor = first + orders
        for offset, raw in records[:cursor]:
            sm.apply(Entry.decode(raw, offset))
        for n, mode in enumerate(modes):
            if n:  # the next --gap orders (and their confirmations)
                cursor = apply_orders(sm, records, cursor, args.gap)
            snapshot.ENGINE_CAPTURE = mode != "old"
            metrics_engine.CAPTURE_FROZEN = mode == "new"
            cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
            cp.checkpoint(sm.applied_offset, 1)
            wall, cpu = time.perf_counter_ns() - wall0, time.thread_time_ns() - cpu0
            samples[mode]["wall"].append(wall / 1e6)
            samples[mode]["cpu"].append(cpu / 1e6)
            sm.flush()
            cp.wait()  # written and uploaded before the next one (at most one in flight)
            for part in ("freeze", "dump"):  # CPU of the apply thread, each alone
                d0 = time.thread_time_ns()
                for sp in sm.engine._plan.streams.values():
                    getattr(sp.core, part)()
                samples[mode][part].append((time.thread_time_ns() - d0) / 1e6)
    finally:
        snapshot.ENGINE_CAPTURE = True
        metrics_engine.CAPTURE_FROZEN = True
        cp.close()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)

    report = Report("checkpoint_pause", args.quick)
    for mode in ("old", "dump", "new"):
        s = samples[mode]
        report.add(mode=mode, captures=len(s["wall"]),
                   wall_ms_p50=round(statistics.median(s["wall"]), 2),
                   wall_ms_max=round(max(s["wall"]), 2),
                   cpu_ms_p50=round(statistics.median(s["cpu"]), 2),
                   cpu_ms_max=round(max(s["cpu"]), 2),
                   dump_cpu_ms_p50=round(statistics.median(s["dump"]), 2),
                   freeze_cpu_ms_p50=round(statistics.median(s["freeze"]), 2),
                   walls=[round(v, 1) for v in s["wall"]])
    new = statistics.median(samples["new"]["wall"])
    report.target("capture_pause_ms_p50", new, "ms", PAUSE_TARGET_MS, higher_is_better=False,
                  note=f"{orders} W3 orders, old path p50 "
                       f"{statistics.median(samples['old']['wall']):.1f} ms, states "
                       f"encoded on the apply thread p50 "
                       f"{statistics.median(samples['dump']['wall']):.1f} ms, load "
                       f"{os.getloadavg()[0]:.1f} at the end (wall above CPU is waiting "
                       f"for a core)")
    report.write(["mode", "captures", "wall_ms_p50", "wall_ms_max", "cpu_ms_p50", "cpu_ms_max",
                  "dump_cpu_ms_p50", "freeze_cpu_ms_p50", "walls"])


if __name__ == "__main__":
    main()
