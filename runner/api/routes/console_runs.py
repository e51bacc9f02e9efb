"""The console's read-only explorer: find runs, a run with its event, hits per edge, simulate,
backtest, metric readers; and giving a claimed review task back. Simulate and backtest walk
drafts in memory and write nothing to the log."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from runner import explore
from runner import operations as ops
from runner.api.console_models import (
    BacktestIn,
    BacktestPublic,
    EdgeHitPublic,
    RunDetailPublic,
    RunSummaryPublic,
    SimulateIn,
    SimulationPublic,
)
from runner.api.deps import Analyst, Svc

router = APIRouter(tags=["console"])
Text = Annotated[str | None, Query(min_length=1, max_length=200)]
Ts = Annotated[int | None, Query(ge=0, le=2**62)]


@router.get("/v1/console/runs", response_model=list[RunSummaryPublic])
def find_runs(svc: Svc, _: Analyst, workflow_id: Text = None,
              version: Annotated[int | None, Query(ge=1, le=10_000)] = None,
              decision: Text = None,
              state: Annotated[Literal["running", "waiting", "decided"] | None, Query()] = None,
              order: Text = None, card: Text = None, customer: Text = None,
              since_ts: Ts = None, until_ts: Ts = None,
              limit: Annotated[int, Query(ge=1, le=explore.runs_listed_max)] = 100):
    """Runs by order, card, customer, workflow, version, decision, state and start time
    (milliseconds), newest first."""
    return explore.find_runs(svc, workflow_id=workflow_id, version=version, decision=decision,
                             state=state, order=order, card=card, customer=customer,
                             since_ts=since_ts, until_ts=until_ts, limit=limit)


@router.get("/v1/console/runs/{run_id}", response_model=RunDetailPublic)
def run_detail(run_id: str, svc: Svc, _: Analyst):
    """One run: its path with each criterion's value or error, metrics, scores, app answers
    and the event."""
    return explore.run_detail(svc, run_id)


@router.get("/v1/console/workflows/{workflow_id}/hits", response_model=list[EdgeHitPublic])
def edge_hits(workflow_id: str, svc: Svc, _: Analyst,
              version: Annotated[int | None, Query(ge=1, le=10_000)] = None):
    """How many runs took each edge, per version."""
    return explore.edge_hits(svc, workflow_id, version)


@router.post("/v1/console/simulate", response_model=SimulationPublic)
def simulate(body: SimulateIn, svc: Svc, _: Analyst):
    """Walk one event, or a past run's inputs, through a workflow (a draft); nothing is
    written. Outside work other than the built-in scorer must be given in scores/apps."""
    event = None if body.event is None else body.event.model_dump()
    return explore.simulate(svc, body.workflow, event, body.run_id, body.metrics, body.scores,
                            body.apps)


@router.post("/v1/console/backtest", response_model=BacktestPublic)
def backtest(body: BacktestIn, svc: Svc, _: Analyst):
    """Replay the most recent runs of the workflow through the draft and the active version:
    the matrix of decision changes, hits per edge of the draft, samples of changed runs."""
    return explore.backtest(svc, body.workflow, body.limit)


@router.get("/v1/console/metrics/readers", response_model=dict[str, list[str]])
def metric_readers(svc: Svc, _: Analyst):
    """Metric name -> the workflows (active version or draft) that read it."""
    return explore.metric_readers(svc)


@router.post("/v1/review/tasks/{run_id}/{node_id}/unclaim", response_model=dict[str, None],
             tags=["review"])
async def unclaim(run_id: str, node_id: str, svc: Svc, user: Analyst):
    """Give a claimed task back to the queue: its claimer, or a manager for anyone's."""
    return await ops.unclaim(svc, run_id, node_id, user.name, override=user.has_role("manager"))
