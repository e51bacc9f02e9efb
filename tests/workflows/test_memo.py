"""Remembered steps and the precomputed edge plans give exactly the results a fresh evaluation
gives: same edge, same trace (errors included), same next node; a new version starts empty."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.workflows.builders import build, edge, small
from tests.workflows.test_random_dags import SETTINGS, _outputs_for_all, valid_dags
from workflows import StepContext, Workflow, WorkflowStore, advance, compile_version, step
from workflows import memo as memo_mod
from workflows.step import _traced


def fresh(version, node_id, ctx):
    """The reference: every criterion evaluated and every trial built, nothing remembered."""
    return _traced(version, version.node(node_id), StepContext.of(ctx))


def same(a, b):
    assert a.to_dict() == b.to_dict()
    assert (a.outside, a.decision) == (b.outside, b.decision)


def odd_value(rng):
    return rng.choice([0, 1, 5, 85, 95, 2**70, -3, 0.0, -0.0, 0.5, 61.0, 90.0, 95.5,
                       math.nan, math.inf, True, False, None, "US", "DE", "95", "", [1],
                       {"a": 1}])


def test_memo_and_edge_plans_match_fresh_evaluation(w3):
    rng = random.Random(3)
    memo = w3._memos["event"]
    for i in range(3000):
        ctx = {"event": {"country": rng.choice(["US", "CA", "DE", 1, None]),
                         "amount": rng.choice([100, 50_000, 0, -0.0, 1e9, "x"])},
               "scores": {"payment_abuse": odd_value(rng)} if i % 7 else {},
               "metrics": {"card_count_5m": odd_value(rng) if i % 3 else rng.randrange(8),
                           "merchant_avg_5m": rng.choice([1.0, 0.0, 5000.5, -1.0])}}
        for node_id in ("event", "score"):
            same(step(w3, node_id, ctx), fresh(w3, node_id, ctx))
    assert memo.enabled and memo.hits > 0  # the event node's values repeat: it remembers


def test_a_float_zero_is_never_keyed_so_its_sign_still_counts():
    wf = small()
    wf["nodes"][0]["edges"] = [edge("e_inv", "block", "1.0 / metrics.card_count_5m > 0.0"),
                               edge("e0", "score", default=True)]
    v = compile_version(build(wf), 1)
    pos = step(v, "event", {"metrics": {"card_count_5m": 0.0}})
    neg = step(v, "event", {"metrics": {"card_count_5m": -0.0}})
    assert (pos.edge_id, neg.edge_id) == ("e_inv", "e0")  # +inf > 0, -inf is not
    assert v._memos["event"].key(StepContext.of({"metrics": {"card_count_5m": -0.0}})) is None
    same(step(v, "event", {"metrics": {"card_count_5m": 0.0}}), pos)


def test_int_float_and_bool_are_distinct_keys(w3):
    memo = w3._memos["event"]
    keys = {memo.key(StepContext.of({"metrics": {"card_count_5m": v}})) for v in (1, 1.0, True)}
    assert len(keys) == 3


def test_a_node_whose_values_rarely_repeat_stops_remembering(monkeypatch):
    monkeypatch.setattr(memo_mod, "trial_lookups", 50)
    v = compile_version(build(small()), 1)
    memo = v._memos["score"]
    for i in range(200):
        ctx = {"event": {"amount": 900 + i}, "scores": {"risk": 80.0 + i / 10}}
        same(step(v, "score", ctx), fresh(v, "score", ctx))
    assert not memo.enabled and not memo.results and memo.lookups == 50
    ctx = {"event": {"amount": 5000}, "scores": {"risk": 10.0}}
    assert step(v, "score", ctx).edge_id == "s_app"


def test_a_node_remembers_at_most_entries_max(monkeypatch):
    monkeypatch.setattr(memo_mod, "entries_max", 10)
    v = compile_version(build(small()), 1)
    for i in range(40):
        step(v, "score", {"event": {"amount": i % 20}, "scores": {"risk": 1.0}})
    assert len(v._memos["score"].results) == 10


@pytest.mark.parametrize("threshold", ["4", "10"])
def test_publishing_a_new_version_starts_an_empty_memo(threshold):
    store = WorkflowStore(known_metrics=["card_count_5m"])
    wf = small()
    ctx = {"metrics": {"card_count_5m": 5}}
    wf["nodes"][0]["edges"] = [edge("e_fast", "block", f"metrics.card_count_5m > {threshold}"),
                               edge("e0", "score", default=True)]
    store.save_draft(build(wf))
    v1 = store.publish("wf").compiled
    first = step(v1, "event", ctx)
    wf["nodes"][0]["edges"][0]["criteria"] = "metrics.card_count_5m > 7"
    store.save_draft(build(wf))
    v2 = store.publish("wf").compiled
    assert v2 is not v1 and not v2._memos["event"].results
    assert step(v2, "event", ctx).edge_id == "e0"
    assert step(v1, "event", ctx).edge_id == first.edge_id == (
        "e_fast" if threshold == "4" else "e0")


def test_to_dict_is_fresh_at_every_level_and_keeps_its_key_order(w3):
    r = step(w3, "score", {"event": {"country": "DE", "amount": 5},
                           "scores": {"payment_abuse": 95.0}, "metrics": {"merchant_avg_5m": 1.0}})
    a = r.to_dict()
    assert list(a) == ["node_id", "edge_id", "next_node_id", "node_kind", "default_taken",
                       "trace", "decision"]
    a["seq"] = 1
    a["trace"][0]["value"] = "edited"
    a["decision"]["action"] = "edited"
    b = r.to_dict()
    assert "seq" not in b and b["trace"][0]["value"] is True
    assert b["decision"] == {"action": "block", "reason": "score above 90"}
    assert b == fresh(w3, "score", {"event": {"country": "DE", "amount": 5},
                                    "scores": {"payment_abuse": 95.0},
                                    "metrics": {"merchant_avg_5m": 1.0}}).to_dict()


def _fresh_step(version, node_id, ctx):
    return _traced(version, version.node(node_id), ctx)


@SETTINGS
@given(valid_dags(), st.lists(st.integers(-10, 6000), min_size=1, max_size=12))
def test_random_dags_walk_as_with_every_trial_built(wf, amounts):
    """The walk (edge plans, memo) against the same walk with every step evaluated afresh, over
    repeated amounts (memo hits) with all outputs, some, or none."""
    version = compile_version(Workflow.model_validate(wf), 1)
    for i, amount in enumerate(amounts * 2):
        scores, apps = _outputs_for_all(wf, amount)
        if i % 3 == 1:
            apps = {k: v for k, v in apps.items() if hash(k) % 2}
        ctx = {"event": {"amount": amount}, "scores": scores if i % 3 != 2 else {},
               "apps": apps if i % 3 != 2 else {}}
        got = advance(version, ctx)
        want = advance(version, ctx, step_fn=_fresh_step)
        assert [s.to_dict() for s in got.steps] == [s.to_dict() for s in want.steps]
        assert (got.node_id, got.decision, got.waiting, got.webhooks) == (
            want.node_id, want.decision, want.waiting, want.webhooks)
