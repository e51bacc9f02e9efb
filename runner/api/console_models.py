"""Response models of the console's API additions (problems, scopes, identity)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runner.api.models import DecisionPublic, EdgeTrialPublic, EventIn, RunPublic
from workflows import Workflow
from workflows.model import names_per_node_max


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemPublic(BaseModel):
    """One validation finding where it happens: on a node, an edge, or the whole workflow."""

    code: str
    message: str
    node_id: str | None = None
    edge_id: str | None = None
    span: tuple[int, int] | None = Field(
        default=None, description="[start, end) characters of the edge's criterion")


class CheckPublic(BaseModel):
    valid: bool
    problems: list[ProblemPublic]
    scopes: dict[str, dict[str, Any]] = Field(
        description="Node id -> what criteria on its edges may read: {event, scores, metrics, "
                    "apps}, each field -> CEL type (apps nest one level per node)")


class MePublic(BaseModel):
    name: str
    kind: Literal["user", "client"]
    role: Literal["analyst", "manager", "admin"] | None


class RunSummaryPublic(BaseModel):
    run_id: str
    event_id: str
    workflow_id: str
    workflow_version: int
    state: str
    decision: str | None
    started_ts: int
    card: str | None
    customer: str | None
    order_id: str | None


class RunDetailPublic(RunPublic):
    event: dict[str, Any] = Field(description="The event the run ran on, with its data fields")


class EdgeHitPublic(BaseModel):
    version: int
    node_id: str
    edge_id: str
    runs: int


class SimulateIn(_In):
    workflow: Workflow
    event: EventIn | None = Field(default=None, description="One event (or give run_id)")
    run_id: str | None = Field(default=None, max_length=200,
                               description="Reuse a past run's event, metrics and app answers")
    metrics: dict[str, float] = Field(default_factory=dict, max_length=names_per_node_max)
    scores: dict[str, float] = Field(default_factory=dict, max_length=names_per_node_max)
    apps: dict[str, dict[str, Any]] = Field(default_factory=dict, max_length=names_per_node_max)


class SimStepPublic(BaseModel):
    node_id: str
    edge_id: str
    next_node_id: str
    node_kind: str
    default_taken: bool
    trace: list[EdgeTrialPublic]
    decision: DecisionPublic | None = None


class SimulationPublic(BaseModel):
    path: list[SimStepPublic]
    node_id: str
    decision: str | None
    waiting_for: str | None = Field(description="The kind of outside work the walk stopped at")
    explanation: list[str]
    scores: dict[str, Any]


class BacktestIn(_In):
    workflow: Workflow
    limit: int = Field(default=1000, ge=1, le=5000, description="The most recent runs to replay")


class DecisionChange(BaseModel):
    before: str
    after: str
    runs: int


class EdgeCount(BaseModel):
    node_id: str
    edge_id: str
    runs: int


class ChangedRun(BaseModel):
    run_id: str
    before: str
    after: str
    path: list[str]


class BacktestPublic(BaseModel):
    workflow_id: str
    active_version: int
    runs: int
    changed: int
    matrix: list[DecisionChange]
    hits: list[EdgeCount]
    samples: list[ChangedRun]
