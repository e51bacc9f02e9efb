"""One walk: apply and the backtest take the same edges, webhooks and timeouts included."""

from __future__ import annotations

import itertools

import pytest

from pipeline.backtest import DECIDED, walk
from replog.entry import Entry
from runner.state import entries
from runner.state.effects import Reply, SendWebhook
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from workflows import WEBHOOK_SENT, Workflow, advance, compile_version

T0 = 1_700_000_000_000


def definition() -> dict:
    """Notify a webhook, then decide on the amount and on what the webhook node reads."""
    return {
        "id": "wh", "name": "webhook then decide", "event_type": "order", "root": "event",
        "nodes": [
            {"kind": "event", "id": "event", "edges": [
                {"id": "big", "to": "notify", "criteria": "event.amount > 5000"},
                {"id": "small", "to": "approve", "default": True}]},
            {"kind": "webhook", "id": "notify", "url": "https://hooks.test/x", "secret_ref": "k",
             "edges": [
                 {"id": "unsent", "to": "block", "criteria": "apps.notify.status_code != 0"},
                 {"id": "sent", "to": "review", "default": True}]},
            {"kind": "review_queue", "id": "review", "queue": "q", "time_limit_ms": 1000,
             "edges": [{"id": "ok", "to": "approve", "criteria": "apps.review.outcome == 'accept'"},
                       {"id": "timeout", "to": "block", "default": True}]},
            {"kind": "decision", "id": "approve", "action": "approve"},
            {"kind": "decision", "id": "block", "action": "block"},
        ],
    }


def test_advance_passes_a_webhook_and_a_timed_out_node_takes_its_default_edge():
    version = compile_version(Workflow.model_validate(definition()), 1)
    first = advance(version, {"event": {"amount": 9000}})
    assert [w.node_id for w in first.webhooks] == ["notify"]
    assert first.waiting is not None and first.node_id == "review"
    apps = {"notify": dict(WEBHOOK_SENT), "review": {"timed_out": True}}
    done = advance(version, {"event": {"amount": 9000}, "apps": apps}, from_node="review")
    assert done.decision.action == "block" and done.steps[0].default_taken
    assert done.steps[0].trace[0].criteria is None  # the criteria were not even tried


@pytest.mark.parametrize("amount, outcome", [(100, None), (9000, None), (9000, "accept"),
                                             (9000, "reject")])
def test_apply_and_the_backtest_take_the_same_edges(tmp_path, amount, outcome):
    sm = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    offsets = itertools.count()

    def apply(kind: str, payload: dict) -> list:
        return sm.apply(Entry(next(offsets), 1, T0, kind, entries.encode(payload)))

    try:
        assert next(e for e in apply(entries.WORKFLOW_PUBLISHED, {
            "workflow_id": "wh", "definition": definition()}) if isinstance(e, Reply)).ok
        effects = apply(entries.EVENT_RECEIVED,
                        {"event_id": "o1", "type": "order", "data": {"amount": amount}})
        (run,) = next(e for e in effects if isinstance(e, Reply)).runs
        hooks = [e for e in effects if isinstance(e, SendWebhook)]
        assert [h.payload["path"] for h in hooks] == ([["event"]] if amount > 5000 else [])
        if outcome is not None:
            task = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
            apply(entries.REVIEW_CLAIMED, task)
            done = apply(entries.REVIEW_DECIDED, dict(task, outcome=outcome))
            run = next(e for e in done if isinstance(e, Reply)).runs[0]
        version = compile_version(Workflow.model_validate(definition()), 1)
        apps = {"review": {"outcome": outcome}} if outcome else {}
        offline = walk(version, {"amount": amount}, {}, {}, apps)
        nodes = "event>" + ">".join(s["next_node_id"] for s in run["path"])
        assert offline.path == nodes
        if run["state"] == "decided":
            assert (offline.status, offline.action) == (DECIDED, run["decision"])
        else:
            assert offline.waiting_node == run["node_id"] == "review"
    finally:
        sm.close()
