"""CPU of a run's JSON made once against made again by each reader, in one process, the two
ways alternated (A B B A) over the same runs.

Applies W3 orders of ``bench/apply_cost.py``'s feed through the real state machine, then times
each reader both ways: the run store's record and its JSON (``RunRecord(**e.record).to_json()``
with the steps' JSON apply made kept by each ``Step``, or made again), and, for an order's event
and metrics serialized once by apply as ``orjson.Fragment``s (tried, not kept: see
docs/cpu-per-order.md), the flusher's Arrow table of run rows and the digest's hash of a run
row holding them, against what apply would pay to make them.

    .venv/bin/python bench/record_json.py [--orders 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.runstore.base import RunRecord  # noqa: E402
from runner.state import digest  # noqa: E402
from runner.state.buffer import _TYPES, RUN_FIELDS, RUN_JSON_COLUMNS, _arrow  # noqa: E402
from runner.state.effects import StoreRun  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402
from runner.state.steps import Step  # noqa: E402


def _docs(run: dict) -> tuple[orjson.Fragment, orjson.Fragment]:
    """The event's and metrics' JSON, made once (orjson writes a Fragment as it is)."""
    return (orjson.Fragment(orjson.dumps(run["event"])),
            orjson.Fragment(orjson.dumps(run["metrics"])))


def _row(run: dict, once: bool) -> tuple:
    """The runs row apply stages (``RunnerStateMachine._save_run``), its event and metrics as
    the dicts or as their JSON made once."""
    event, metrics = _docs(run) if once else (run["event"], run["metrics"])
    return tuple(run["offset" if f == "offset_" else f] for f in RUN_FIELDS[:12]) + (
        event, metrics, run["scores"], run["apps"], run["waiting_for"])


def _us(work, n: int) -> float:
    t0 = time.thread_time_ns()
    work()
    return (time.thread_time_ns() - t0) / n / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    feed, measured_from, _ = build_feed(args.orders, 7)
    scratch = Path(tempfile.mkdtemp(prefix="railflow-record-json-"))
    sm = RunnerStateMachine(scratch / "node")
    try:
        stores: list[StoreRun] = []
        for i, (offset, raw) in enumerate(feed.records):
            effects = sm.apply(Entry.decode(raw, offset))
            if i >= measured_from:
                stores += [e for e in effects if isinstance(e, StoreRun)]
        sm.flush()
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)
    n = len(stores)

    def records(once: bool) -> None:
        for e in stores:
            if not once:  # as before: every step's JSON made again
                for step in e.run["path"]:
                    if step.__class__ is Step:
                        step._json = None
            RunRecord(**e.record).to_json()

    rows = {once: [_row(e.run, once) for e in stores] for once in (False, True)}
    cases = {
        "run store record + JSON (steps)": records,
        "flusher's Arrow of run rows": lambda once: _arrow(RUN_FIELDS, rows[once],
                                                           RUN_JSON_COLUMNS, _TYPES["runs"]),
        "digest's hash of a run row": lambda once: [digest.run_hash(r) for r in rows[once]],
    }
    print(f"{n} runs, {args.rounds} rounds of A B B A; CPU us per run, medians (NOISY)")
    for name, work in cases.items():
        again, once = [], []
        for _ in range(args.rounds):
            for flag in (False, True, True, False):
                (once if flag else again).append(_us(lambda: work(flag), n))  # noqa: B023
        print(f"  {name:30} made again {statistics.median(again):6.2f}   "
              f"made once {statistics.median(once):6.2f}")
    def docs() -> None:
        for e in stores:
            _docs(e.run)

    cost = [_us(docs, n) for _ in range(args.rounds)]
    print(f"  {'apply: event + metrics JSON':30} {statistics.median(cost):6.2f}")


if __name__ == "__main__":
    main()
