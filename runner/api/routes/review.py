"""The built-in review queue: list, claim, decide."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from runner import operations as ops
from runner.api.deps import Analyst, Svc
from runner.api.models import ReviewDecisionIn, ReviewTaskPublic, RunPublic

router = APIRouter(prefix="/v1/review", tags=["review"])


@router.get("/tasks", response_model=list[ReviewTaskPublic])
def tasks(svc: Svc, _: Analyst,
          queue: Annotated[str | None, Query(max_length=200)] = None,
          status: Annotated[Literal["pending", "done", "expired"], Query()] = "pending",
          limit: Annotated[int, Query(ge=1, le=500)] = 100):
    return ops.review_tasks(svc, queue, status, limit)


@router.post("/tasks/{run_id}/{node_id}/claim", response_model=dict[str, str])
async def claim(run_id: str, node_id: str, svc: Svc, user: Analyst):
    return await ops.claim(svc, run_id, node_id, user.name)


@router.post("/tasks/{run_id}/{node_id}/decide", response_model=RunPublic)
async def decide(run_id: str, node_id: str, body: ReviewDecisionIn, svc: Svc, user: Analyst):
    """Record the reviewer's outcome; the run resumes along the matching edge."""
    return await ops.decide(svc, run_id, node_id, user.name, body.outcome,
                            override=user.has_role("manager"), reason=body.reason)
