"""The seed's example as a fixture with its expected decisions, and the W3 demo."""

import pytest

from workflows import advance, step, validate
from workflows.examples import W3_METRICS, sift_example, w3_demo


def test_examples_are_valid():
    assert validate(sift_example()) == []
    assert validate(w3_demo(), known_metrics=W3_METRICS) == []


@pytest.mark.parametrize(
    ("score", "country", "expected_node", "edge"),
    [
        (95.0, "US", "block_high_score", "block_above_90"),
        (90.5, "DE", "block_high_score", "block_above_90"),
        (90.0, "DE", "block_foreign", "block_above_80_foreign"),  # 90 is not above 90
        (85.0, "DE", "block_foreign", "block_above_80_foreign"),
        (85.0, "US", "review", "review_above_60"),
        (85.0, "CA", "review", "review_above_60"),
        (80.0, "DE", "review", "review_above_60"),  # 80 is not above 80
        (61.0, "FR", "review", "review_above_60"),
        (60.0, "FR", "approve", "approve_otherwise"),
        (0.0, "US", "approve", "approve_otherwise"),
        (85, "BR", "block_foreign", "block_above_80_foreign"),  # integer scores read as doubles
    ],
)
def test_sift_example_decisions(sift, score, country, expected_node, edge):
    ctx = {"event": {"country": country}, "scores": {"payment_abuse": score}}
    result = step(sift, "score", ctx)
    assert result.next_node_id == expected_node
    assert result.edge_id == edge
    assert result.trace[-1].edge_id == edge
    assert all(not t.value for t in result.trace[:-1])


def test_sift_walk_stops_for_score_then_review(sift):
    walk = advance(sift, {"event": {"country": "US"}})
    assert walk.node_id == "score" and walk.waiting.kind == "score"
    assert walk.waiting.scores == ("payment_abuse",) and walk.waiting.timeout_ms == 200
    ctx = {"event": {"country": "US"}, "scores": {"payment_abuse": 70.0}}
    walk = advance(sift, ctx, from_node="score")
    assert walk.node_id == "review" and walk.waiting.queue == "manual_review"
    assert walk.waiting.outcomes == ("accept", "reject")
    for outcome, action, node in [("accept", "approve", "approve_reviewed"),
                                  ("reject", "block", "block_reviewed")]:
        done = advance(sift, {**ctx, "apps": {"review": {"outcome": outcome}}}, from_node="review")
        assert (done.node_id, done.decision.action) == (node, action)


def test_sift_full_walk_from_root_with_everything_known(sift):
    walk = advance(sift, {"event": {"country": "DE"}, "scores": {"payment_abuse": 99.0}})
    assert [s.node_id for s in walk.steps] == ["event", "score"]
    assert walk.decision.action == "block" and walk.decision.reason == "score above 90"


@pytest.mark.parametrize(
    ("count", "score", "amount", "avg", "expected"),
    [
        (5, 10.0, 100, 100.0, "block_velocity"),
        (4, 95.0, 100, 100.0, "block_high_score"),
        (1, 10.0, 5000, 100.0, "review"),  # 50 x the merchant's 5-minute average
        (1, 10.0, 900, 100.0, "approve"),
    ],
)
def test_w3_demo_reads_metrics(w3, count, score, amount, avg, expected):
    ctx = {"event": {"country": "US", "amount": amount},
           "metrics": {"card_count_5m": count, "merchant_avg_5m": avg, "card_sum_5m": 0},
           "scores": {"payment_abuse": score}}
    assert advance(w3, ctx).node_id == expected
