"""Workflows: cost of one CEL criterion and of one whole ``step``, beside their peers.

Workload: the W3 demo workflow (WORKLOADS.md), compiled once; a seeded stream of order
contexts spread over every branch (velocity block, score blocks, review, approve).

Measured, in the same run:
- criterion: one compiled criterion evaluated on a prepared CEL context, with
  common-expression-language (our engine), cel-python (peer) and a hand-written Python lambda
  (the floor: what an ``eval``-free closure costs);
- step: ``workflows.step`` from the score node (convert the planned reads, try the edges in
  order, build the trace), beside the same walk done with cel-python (whole context converted,
  edges in order), and ``advance`` from the root to the decision (two steps);
- apply walk: an order as the runner's apply walks it: ``advance`` from the root stops at the
  score node (no score yet), the score is put in the context (one context for both rounds) and
  ``advance`` goes on from there to the decision, each step recorded as the runner records it
  (a ``runner.state.steps.Step`` and its JSON, which the digest hashes and DuckDB stores).
  The event node reads
  one small-valued metric, so it answers from its memo (``workflows.memo``); the score node's
  values do not repeat, so it stops remembering after its trial lookups and computes. Beside
  it, the same walk on a copy of the version with no memo (every step computed).
- publish: ``compile_version`` of the workflow (validation, type checking, compilation).

Each figure is min/median/max over repeats of the per-operation time in microseconds.
Usage: ``.venv/bin/python bench/workflows_step.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import celpy  # noqa: E402

from runner.state.steps import Step  # noqa: E402
from workflows import advance, compile_version, step  # noqa: E402
from workflows.activation import StepContext, activation, read_plan  # noqa: E402
from workflows.examples import W3_METRICS, w3_demo  # noqa: E402
from workflows.step import Walk  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "workflows_step.json"
CRITERION_TARGET_US = 5.0


def contexts(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append({
            "event": {"event_id": f"e{i}", "ts": 1_700_000_000_000 + i,
                      "card": f"c{rng.randrange(1000)}",
                      "customer": f"u{rng.randrange(1000)}", "merchant": f"m{rng.randrange(50)}",
                      "mcc": "5411", "country": rng.choice(["US", "CA", "DE", "FR", "BR"]),
                      "region": "r", "channel": "card-not-present", "device": "d", "ip": "1.2.3.4",
                      "shipping_address": "a", "amount": rng.randrange(100, 200_000),
                      "currency": "EUR", "is_fraud": False, "is_storno": False, "is_alert": False},
            "scores": {"payment_abuse": round(rng.uniform(0, 100), 2)},
            "metrics": {"card_count_5m": rng.choice([1, 1, 2, 3, 5]),
                        "card_sum_5m": rng.randrange(0, 500_000),
                        "merchant_avg_5m": rng.uniform(1_000, 50_000)},
            "apps": {},
        })
    return out


def interleaved(cases: dict[str, tuple], repeats: int) -> dict[str, list[float]]:
    """Per-operation microseconds of each (fn, items) case, one repeat of every case per
    round, so a burst of load on the shared machine hits the peers alike."""
    for fn, items in cases.values():
        for x in items[:50]:
            fn(x)  # warm-up, not counted
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, items) in cases.items():
            t0 = time.perf_counter()
            for x in items:
                fn(x)
            times[name].append((time.perf_counter() - t0) / len(items) * 1e6)
    return times


def summary(name: str, times: list[float], peer: str | None = None,
            peer_times: list[float] | None = None) -> dict:
    row = {"name": name, "unit": "us/op", "min": min(times), "median": statistics.median(times),
           "max": max(times), "repeats": len(times)}
    if peer is not None:
        row["peer"] = peer
        row["ratio_vs_peer"] = statistics.median(times) / statistics.median(peer_times)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, repeats = (2_000, 5) if args.quick else (20_000, 9)
    celpy_n = max(n // 20, 100)  # cel-python is ~1,000x slower: fewer contexts, same rounds

    t0 = time.perf_counter()
    version = compile_version(w3_demo(), 1, known_metrics=W3_METRICS)
    publish_ms = (time.perf_counter() - t0) * 1e3
    publish_runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        compile_version(w3_demo(), 1, known_metrics=W3_METRICS)
        publish_runs.append((time.perf_counter() - t0) * 1e6)

    ctxs = contexts(n)
    score = version.node("score")
    results = []

    # --- one criterion, each engine on its own prepared context ----------------------------
    env = celpy.Environment()
    floors = {
        "block_above_90": lambda c: c["scores"]["payment_abuse"] > 90.0,
        "block_above_80_foreign": lambda c: c["scores"]["payment_abuse"] > 80.0
        and c["event"]["country"] not in ("US", "CA"),
        "review_above_60": lambda c: c["scores"]["payment_abuse"] > 60.0
        or float(c["event"]["amount"]) > 10.0 * c["metrics"]["merchant_avg_5m"],
    }
    celpy_prepared = [celpy.json_to_cel({k: ctx[k] for k in ("event", "scores", "metrics")})
                      for ctx in ctxs[:celpy_n]]
    criterion_medians: list[float] = []
    criterion_mins: list[float] = []
    for edge in score.edges:
        prog = edge.criteria.program
        plan = read_plan([edge.criteria])
        prepared = [activation(plan, StepContext.of(ctx))[0] for ctx in ctxs]
        peer_prog = env.program(env.compile(edge.criteria.source))
        t = interleaved({"ours": (prog.execute, prepared),
                         "peer": (peer_prog.evaluate, celpy_prepared),
                         "floor": (floors[edge.id], ctxs)}, repeats)
        ours, peer, floor = t["ours"], t["peer"], t["floor"]
        results.append(summary(f"criterion {edge.id}: common-expression-language", ours,
                               "cel-python", peer))
        results.append(summary(f"criterion {edge.id}: cel-python", peer))
        results.append(summary(f"criterion {edge.id}: python lambda (floor)", floor))
        results[-3]["ratio_vs_floor"] = statistics.median(ours) / statistics.median(floor)
        criterion_medians.append(statistics.median(ours))
        criterion_mins.append(min(ours))

    # --- a whole step from the score node, and a walk from the root -----------------------
    peer_programs = [(e.id, e.to, env.program(env.compile(e.criteria.source)))
                     for e in score.edges]

    def celpy_step(ctx):
        activation = celpy.json_to_cel(ctx)
        trace = []
        for edge_id, to, prog in peer_programs:
            try:
                value = bool(prog.evaluate(activation))
            except Exception:  # noqa: BLE001 - same rule as ours: an error is false
                value = False
            trace.append((edge_id, value))
            if value:
                return to, trace
        return score.default.to, trace

    unremembered = compile_version(w3_demo(), 1, known_metrics=W3_METRICS)
    unremembered._memos.clear()  # every step computed

    def apply_walk(c: dict, version=version) -> Walk:
        """As ``RunnerStateMachine._walk``: one context for both rounds (it holds the run's
        scores and apps, changed in place), each step recorded as a fact with its JSON."""
        scores: dict = {}
        apps: dict = {}
        ctx = StepContext(c["event"], scores, c["metrics"], apps)
        path: list[Step] = []
        walk = advance(version, ctx)
        for s in walk.steps:
            path.append(Step(s, len(path), 0))
            path[-1].to_json()
        if walk.decision is None:  # waiting at the score node, as the runner's built-in scorer
            scores.update(c["scores"])
            apps[walk.node_id] = dict(c["scores"])
            walk = advance(version, ctx, walk.node_id)
            for s in walk.steps:
                path.append(Step(s, len(path), 0))
                path[-1].to_json()
        return walk

    t = interleaved({"ours": (lambda c: step(version, "score", c), ctxs),
                     "peer": (celpy_step, ctxs[:celpy_n]),
                     "walk": (lambda c: advance(version, c), ctxs),
                     "apply": (apply_walk, ctxs),
                     "apply_no_memo": (lambda c: apply_walk(c, unremembered), ctxs)}, repeats)
    ours_step, peer_step, walk = t["ours"], t["peer"], t["walk"]
    results.append(summary("step(score): workflows.step", ours_step, "cel-python step",
                           peer_step))
    results.append(summary("step(score): cel-python step", peer_step))
    results.append(summary("advance(root -> decision): 2 steps", walk))
    results.append(summary("apply walk: advance to score, then to decision, steps recorded",
                           t["apply"],
                           "the same, no memo", t["apply_no_memo"]))
    results.append(summary("apply walk: the same, no memo", t["apply_no_memo"]))
    results.append(summary("publish: compile_version(w3_demo)", publish_runs))

    # parity: both engines take the same edges on every context measured
    mismatches = sum(step(version, "score", c).next_node_id != celpy_step(c)[0]
                     for c in ctxs[:celpy_n])
    decisions: dict[str, int] = {}
    for c in ctxs:
        node_id = advance(version, c).node_id
        decisions[node_id] = decisions.get(node_id, 0) + 1
        if apply_walk(c).node_id != node_id or apply_walk(c, unremembered).node_id != node_id:
            mismatches += 1  # the apply's two walks end where the one walk does

    # The target is judged on the least disturbed repeat (timeit's convention: on a shared
    # machine the other repeats measure the neighbours); the medians are reported beside it.
    worst_criterion = max(criterion_mins)
    report = {
        "name": "workflows_step", "quick": args.quick,
        "started_at": datetime.now(UTC).isoformat(),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "workload": {"contexts": n, "cel_python_contexts": celpy_n, "repeats": repeats,
                     "first_publish_ms": publish_ms, "walk_ends": decisions,
                     "parity_mismatches_vs_cel_python": mismatches},
        "results": results,
        "targets": {"criterion_eval": {"value": worst_criterion, "unit": "us",
                                       "target": CRITERION_TARGET_US,
                                       "met": worst_criterion <= CRITERION_TARGET_US,
                                       "median_of_slowest": max(criterion_medians)}},
    }
    print(f"{'measure':62s} {'min':>9s} {'median':>9s} {'max':>9s}  ratio")
    for r in results:
        ratio = f"{r['ratio_vs_peer']:.3f} vs {r['peer']}" if "peer" in r else ""
        if "ratio_vs_floor" in r:
            ratio += f", {r['ratio_vs_floor']:.1f}x floor"
        print(f"{r['name']:62s} {r['min']:9.2f} {r['median']:9.2f} {r['max']:9.2f}  {ratio}")
    print(f"walk ends: {decisions}; parity mismatches vs cel-python: {mismatches}")
    print(f"target: slowest criterion {worst_criterion:.2f} us (best repeat; median "
          f"{max(criterion_medians):.2f} us) <= {CRITERION_TARGET_US} us:"
          f" {'met' if worst_criterion <= CRITERION_TARGET_US else 'NOT met'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"wrote {RESULTS}")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
