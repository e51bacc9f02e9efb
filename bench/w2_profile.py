"""W2's ingest path alone, for a profiler: CPU µs per event of ``ingest_many`` (or of one
event per call), each repeat on a fresh engine as ``bench/metrics_w2.py --quick`` runs it, and
nothing else timed (engine start, ``define`` and ``close`` stay outside).

With ``perf record -D -1 --control fifo:CTL,ACK`` and ``PERF_CTL=CTL PERF_ACK=ACK`` in the
environment, perf samples only the timed part (the script enables and disables it around each
repeat), so setup and teardown do not drown the ingest path in the profile::

    mkfifo /tmp/ctl /tmp/ack
    PERF_CTL=/tmp/ctl PERF_ACK=/tmp/ack perf record -D -1 --control fifo:/tmp/ctl,/tmp/ack \\
        -F 2999 --call-graph dwarf,16384 .venv/bin/python bench/w2_profile.py arrow --repeats 30

Usage: ``.venv/bin/python bench/w2_profile.py {arrow,lists,one} [--repeats R] [--events N]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import perf_control  # noqa: E402
from bench.metrics_w2 import BATCH_EVENTS, definitions, events_around_midnight  # noqa: E402


def main() -> int:
    import numpy as np
    import pyarrow as pa

    from metrics_engine.engine import Engine

    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["arrow", "lists", "one"])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--events", type=int, default=1_000)  # metrics_w2.py --quick's
    args = ap.parse_args()
    events = events_around_midnight(args.events)
    table = pa.Table.from_pylist([ev for _, ev in events])
    ts = np.array([t for t, _ in events], dtype=np.int64)
    # As metrics_w2.py's runs: the objects made so far (modules, the events) stay out of the
    # collector's passes, which would otherwise scan them inside the timed ingest.
    gc.freeze()
    cpu_us = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            eng = Engine(tmp)
            for d in definitions():
                eng.define(d)
            perf_control("enable")
            c0 = time.process_time()
            if args.mode == "one":
                for t, ev in events:
                    eng.ingest("payments", ev, t)
            else:
                for lo in range(0, len(events), BATCH_EVENTS):
                    eng.ingest_many("payments", ts[lo:lo + BATCH_EVENTS],
                                    table.slice(lo, BATCH_EVENTS), arrow=args.mode == "arrow")
            cpu_us.append((time.process_time() - c0) / len(events) * 1e6)
            perf_control("disable")
            eng.close()
    cpu_us.sort()
    print(f"{args.mode}: {len(events)} events x {args.repeats} repeats, CPU us/event "
          f"min {cpu_us[0]:.2f} median {cpu_us[len(cpu_us) // 2]:.2f} max {cpu_us[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
