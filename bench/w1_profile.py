"""W1's batched path alone, for a profiler and for A/B runs: CPU µs per event of
``ingest_many`` into Arrow columns as ``bench/metrics_w1.py`` runs it (``w1``: Q1 and Q2 over
5 minutes, 10,000 rows a call; ``misaligned``: K misaligned windows, 500 rows a call; ``one``
adds W1 one event per call), after a warm-up, the writer's CPU included (the clock stops after
``sync``), split by thread.

With ``perf record -D -1 --control fifo:CTL,ACK`` and ``PERF_CTL=CTL PERF_ACK=ACK`` in the
environment, perf samples only the timed part (as ``bench/w2_profile.py``)::

    mkfifo /tmp/ctl /tmp/ack
    PERF_CTL=/tmp/ctl PERF_ACK=/tmp/ack perf record -D -1 --control fifo:/tmp/ctl,/tmp/ack \\
        -F 1999 --call-graph dwarf,16384 .venv/bin/python bench/w1_profile.py w1

Usage: ``.venv/bin/python bench/w1_profile.py {w1,misaligned,one,misaligned-one}
[--events N] [--repeats R] [--windows K] [--batch B] [--level L]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import perf_control  # noqa: E402
from bench.metrics_w1 import (  # noqa: E402
    BATCH_EVENTS,
    CACHE_ENTRIES,
    DATA,
    MISALIGNED_BATCH,
    Q1,
    Q2,
    CpuSplit,
    ensure_data,
    misaligned_queries,
    misaligned_warm_ms,
    warm_cut,
)


def main() -> int:
    import pyarrow.parquet as pq

    from metrics_engine.engine import Engine

    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["w1", "misaligned", "one", "misaligned-one"])
    ap.add_argument("--events", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--windows", type=int, default=120)
    ap.add_argument("--batch", type=int, default=0, help="rows a call (0: metrics_w1.py's)")
    ap.add_argument("--level", type=int, default=None, help="the writer's zstd level")
    args = ap.parse_args()
    if args.level is not None:
        import metrics_engine.reservoir as reservoir

        reservoir.ZSTD_LEVEL = args.level
    misaligned = args.mode.startswith("misaligned")
    n = args.events or (20_000 if misaligned else 200_000)
    texts = (misaligned_queries(args.windows) if misaligned
             else [Q1.format(w="5 MINUTES"), Q2.format(w="5 MINUTES")])
    batch = args.batch or (MISALIGNED_BATCH if misaligned else BATCH_EVENTS)
    ensure_data()
    table = pq.read_table(DATA).slice(0, n)
    ts = table.column("ts").to_numpy()
    cols = table.drop_columns(["ts"])
    cut = warm_cut(ts, misaligned_warm_ms(args.windows)) if misaligned else n // 5
    cut = -(-cut // batch) * batch
    one = args.mode in ("one", "misaligned-one")
    rows = cols.to_pylist() if one else None
    gc.freeze()
    cpu, splits = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            eng = Engine(tmp, cache_entries_max=CACHE_ENTRIES)
            for q in texts:
                eng.define(q)
            for lo in range(0, cut, batch):
                eng.ingest_many("payments", ts[lo:lo + batch], cols.slice(lo, batch), arrow=True)
            eng.sync()
            perf_control("enable")
            split = CpuSplit()
            c0 = time.process_time()
            if one:
                for i in range(cut, n):
                    eng.ingest("payments", rows[i], int(ts[i]))
            else:
                for lo in range(cut, n, batch):
                    eng.ingest_many("payments", ts[lo:lo + batch], cols.slice(lo, batch),
                                    arrow=True)
            eng.sync()
            cpu.append((time.process_time() - c0) / (n - cut) * 1e6)
            splits.append(split.stop(n - cut))
            perf_control("disable")
            eng.close()
    by = {k: statistics.median([s[k] for s in splits]) for k in splits[0]}
    print(f"{args.mode}: {n - cut} events x {args.repeats}, CPU us/event median "
          f"{statistics.median(cpu):.3f} min {min(cpu):.3f} (ingest {by['cpu_us_ingest']:.3f}, "
          f"writer {by['cpu_us_writer']:.3f}, other {by['cpu_us_other']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
