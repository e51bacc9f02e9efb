"""Request and response models of the HTTP API (named like ``WorkflowCreate`` / ``RunPublic``)."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from workflows import Workflow

event_fields_max = 200
text_chars_max = 4_000


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _json_encodable(value: dict[str, Any]) -> dict[str, Any]:
    """The log stores JSON: integers must fit in 64 bits, keys must be strings."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise ValueError(f"not encodable as JSON: {exc}") from None
    return value


class EventIn(_In):
    """An event from a client system; ``ts`` is informative (the leader stamps the log time)."""

    event_id: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f/]+$")
    type: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    ts: int | None = Field(default=None, ge=0, le=2**62)
    data: dict[str, Any] = Field(default_factory=dict, max_length=event_fields_max)

    _data_encodable = field_validator("data")(_json_encodable)


class EdgeTrialPublic(BaseModel):
    edge_id: str
    criteria: str | None
    value: bool
    error: str | None = None


class DecisionPublic(BaseModel):
    action: str
    reason: str = ""


class StepPublic(BaseModel):
    seq: int
    node_id: str
    edge_id: str
    next_node_id: str
    node_kind: str
    default_taken: bool
    trace: list[EdgeTrialPublic]
    decision: DecisionPublic | None = None
    ts: int


class RunPublic(BaseModel):
    run_id: str
    event_id: str
    workflow_id: str
    workflow_version: int
    state: Literal["running", "waiting", "decided"]
    decision: str | None
    node_id: str
    waiting_for: Literal["app", "review"] | None = None
    path: list[StepPublic]
    explanation: list[str]
    metrics: dict[str, Any]
    scores: dict[str, Any]
    apps: dict[str, Any]
    offset: int = Field(description="Log offset of the entry that last changed the run")
    started_ts: int
    updated_ts: int


class EventResult(BaseModel):
    event_id: str
    offset: int = Field(description="Log offset of the event's entry")
    duplicate: bool
    runs: list[RunPublic]


class AppResultIn(_In):
    result: dict[str, Any] = Field(max_length=event_fields_max)

    _result_encodable = field_validator("result")(_json_encodable)


class WorkflowPublic(BaseModel):
    workflow_id: str
    active_version: int | None
    event_type: str | None
    latest_version: int | None
    has_draft: bool


class DraftPublic(BaseModel):
    workflow_id: str
    definition: Workflow
    problems: list[str] = []


class ValidationPublic(BaseModel):
    valid: bool
    problems: list[str]


class VersionPublic(BaseModel):
    version: int
    event_type: str
    published_ts: int
    published_by: str | None


class PublishResult(BaseModel):
    workflow_id: str
    version: int
    event_type: str


class RollbackIn(_In):
    version: int = Field(ge=1, le=10_000)


class MetricCreate(_In):
    text: str = Field(min_length=1, max_length=text_chars_max)


class MetricPublic(BaseModel):
    name: str
    text: str
    defined_ts: int


class MetricDefined(BaseModel):
    names: list[str]


class ReviewTaskPublic(BaseModel):
    run_id: str
    node_id: str
    queue: str | None
    status: str
    deadline_ts: int | None
    created_ts: int
    claimed_by: str | None
    claim_expires_ts: int | None = Field(
        default=None, description="When the claim lapses and anyone may claim the task")
    outcome: dict[str, Any] | None
    event: dict[str, Any]
    scores: dict[str, Any]
    metrics: dict[str, Any]
    workflow_id: str


class ReviewDecisionIn(_In):
    outcome: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000, description="Why, for the run's record")


class TokenRequest(_In):
    username: str = Field(min_length=1, max_length=100)
    password: str = Field(min_length=1, max_length=200)


class TokenPublic(BaseModel):
    access_token: str
    token_type: str = "bearer"
    role: str


class HealthPublic(BaseModel):
    status: str
    node_id: str
    role: str
    leader_url: str | None
    applied_offset: int
    # decided runs held in memory until the run store confirms them (grows in a store outage)
    runs_awaiting_store: int = 0
    diverged_offsets: list[int] = []  # checkpoint offsets where replicas' digests differed
    problems: list[str] = []  # what keeps the node from working now (log, election, apply)


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    run_id: str | None = None
    node_id: str | None = None
    event: dict[str, Any] = Field(default_factory=dict)


class ScorePublic(BaseModel):
    result: dict[str, float]
