"""Example workflows: the Sift seed's example and the W3 demo of WORKLOADS.md.

Scores run from 0 to 100. Both run on the ``order`` event with its default schema.
"""

from __future__ import annotations

from workflows.model import (
    DecisionAction,
    DecisionNode,
    Edge,
    EventNode,
    ReviewQueueNode,
    ScoreNode,
    Workflow,
)

W3_METRICS = ("card_sum_5m", "card_count_5m", "merchant_avg_5m")


def _decisions() -> list[DecisionNode]:
    return [
        DecisionNode(id="block_high_score", action=DecisionAction.block, reason="score above 90"),
        DecisionNode(id="block_foreign", action=DecisionAction.block,
                     reason="score above 80 outside the US and Canada"),
        DecisionNode(id="approve_reviewed", action=DecisionAction.approve,
                     reason="accepted in review"),
        DecisionNode(id="block_reviewed", action=DecisionAction.block,
                     reason="rejected in review, or not reviewed in time"),
        DecisionNode(id="approve", action=DecisionAction.approve, reason="score 60 or below"),
    ]


def _review() -> ReviewQueueNode:
    return ReviewQueueNode(
        id="review", queue="manual_review", time_limit_ms=24 * 3600 * 1000,
        outcomes=["accept", "reject"],
        edges=[
            Edge(id="review_accept", to="approve_reviewed",
                 criteria='apps.review.outcome == "accept"'),
            Edge(id="review_default", to="block_reviewed", default=True),
        ],
    )


def sift_example() -> Workflow:
    """Block above 90; block above 80 unless the country is US or CA; review above 60;
    approve otherwise (the seed's example)."""
    return Workflow(
        id="sift_example", name="Sift example: score, block, review, approve",
        event_type="order", root="event",
        nodes=[
            EventNode(id="event", edges=[Edge(id="to_score", to="score", default=True)]),
            ScoreNode(id="score", app="score", scores=["payment_abuse"], timeout_ms=200, edges=[
                Edge(id="block_above_90", to="block_high_score",
                     criteria="scores.payment_abuse > 90.0"),
                Edge(id="block_above_80_foreign", to="block_foreign",
                     criteria='scores.payment_abuse > 80.0 && !(event.country in ["US", "CA"])'),
                Edge(id="review_above_60", to="review", criteria="scores.payment_abuse > 60.0"),
                Edge(id="approve_otherwise", to="approve", default=True),
            ]),
            _review(),
            *_decisions(),
        ],
    )


def w3_demo() -> Workflow:
    """The W3 workflow: the Sift example plus sliding-window metrics of W1 in the criteria."""
    return Workflow(
        id="w3_demo", name="W3 demo: score and velocity",
        event_type="order", root="event", metrics=list(W3_METRICS),
        nodes=[
            EventNode(id="event", edges=[
                Edge(id="block_card_velocity", to="block_velocity",
                     criteria="metrics.card_count_5m > 4"),
                Edge(id="to_score", to="score", default=True),
            ]),
            ScoreNode(id="score", app="score", scores=["payment_abuse"], timeout_ms=200, edges=[
                Edge(id="block_above_90", to="block_high_score",
                     criteria="scores.payment_abuse > 90.0"),
                Edge(id="block_above_80_foreign", to="block_foreign",
                     criteria='scores.payment_abuse > 80.0 && !(event.country in ["US", "CA"])'),
                Edge(id="review_above_60", to="review", criteria=(
                    "scores.payment_abuse > 60.0 || "
                    "double(event.amount) > 10.0 * metrics.merchant_avg_5m"
                )),
                Edge(id="approve_otherwise", to="approve", default=True),
            ]),
            _review(),
            DecisionNode(id="block_velocity", action=DecisionAction.block,
                         reason="more than 4 payments of this card in 5 minutes"),
            *_decisions(),
        ],
    )
