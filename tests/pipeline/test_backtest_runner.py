"""The backtest gives the online runner's numbers on the same events: the same decision,
state and path for every order, the same hits per edge. The runner here is the real state
machine (``RunnerStateMachine`` with the real metrics engine and the built-in demo scorer);
the backtest runs the features job and the Spark walk over the same synthetic orders."""

from collections import Counter

import pyarrow.parquet as pq
import pytest

from pipeline.backtest import backtest, summarize
from pipeline.feature_sets import W3
from pipeline.features import point_in_time
from pipeline.synthetic import generate
from replog.entry import Entry
from runner.demo import W1_METRICS, w3_definition
from runner.state import entries
from runner.state.effects import Reply
from runner.state.machine import RunnerStateMachine
from workflows import Workflow

ORDERS = 3_000


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    # tiny's busiest stretch: card testing bursts trip the velocity rule, scores spread out.
    table = generate("tiny", 7).slice(0, ORDERS)
    d = tmp_path_factory.mktemp("orders")
    pq.write_table(table, d / "events.parquet", row_group_size=1_000)
    return d, table.to_pylist()


@pytest.fixture(scope="module")
def online(orders, tmp_path_factory):
    _, rows = orders
    machine = RunnerStateMachine(tmp_path_factory.mktemp("runner"))
    offset = 0

    def apply(kind, payload, ts):
        nonlocal offset
        effects = machine.apply(Entry(offset, 1, ts, kind, entries.encode(payload)))
        offset += 1
        return next(e for e in effects if isinstance(e, Reply))

    t0 = rows[0]["ts"]
    for text in W1_METRICS:
        assert apply(entries.METRIC_DEFINED, {"text": text}, t0).ok
    assert apply(entries.WORKFLOW_PUBLISHED,
                 {"workflow_id": "w3_demo", "definition": w3_definition()}, t0).ok
    runs = {}
    for r in rows:
        data = {k: v for k, v in r.items() if k not in ("event_id", "seq", "ts")}
        reply = apply(entries.EVENT_RECEIVED, {"event_id": r["event_id"], "type": "order",
                                               "data": data}, r["ts"])
        assert reply.ok, reply
        (run,) = reply.runs
        runs[r["event_id"]] = run
    machine.close()
    return runs


def test_backtest_decisions_paths_and_hits_equal_the_runner(spark, orders, online):
    d, rows = orders
    history = point_in_time(spark.read.parquet(str(d)), W3)
    workflow = Workflow.model_validate(w3_definition())
    out = backtest(history, workflow, 1).cache()
    got = {r.event_id: r for r in out.collect()}
    assert len(got) == ORDERS
    mismatches = []
    for event_id, run in online.items():
        b = got[event_id]
        want_state = {"decided": "decided", "waiting": "needs_app_answer"}[run["state"]]
        want_path = ">".join([run["path"][0]["node_id"],
                              *(s["next_node_id"] for s in run["path"])])
        if (b.status, b.action, b.path) != (want_state, run["decision"], want_path):
            mismatches.append((event_id, (b.status, b.action, b.path),
                               (want_state, run["decision"], want_path)))
    assert mismatches == []
    decisions = Counter(run["decision"] or run["state"] for run in online.values())
    # The orders exercise the workflow: approvals, blocks and reviews all occur.
    assert decisions["approve"] and decisions["block"] and decisions["waiting"], decisions
    online_hits = Counter(s["edge_id"] for run in online.values() for s in run["path"])
    summary = summarize(out, compare=False, workflow=workflow, version=1)
    assert {h["edge_id"]: h["runs"] for h in summary["hits"]} == dict(online_hits)
    assert {h["node_id"] for h in summary["hits"]} >= {"event", "score"}
