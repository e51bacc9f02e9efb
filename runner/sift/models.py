"""The Sift API's request and reply bodies, for the OpenAPI document (replies are built as
plain dicts by ``present`` and ``calls``; these models type them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SiftEventIn(BaseModel):
    """A Sift event: reserved ``$`` fields and any custom fields."""

    model_config = ConfigDict(extra="allow")

    type_: str = Field(alias="$type", min_length=1, max_length=64,
                       description="$create_order, $transaction, or a custom type")
    api_key: str = Field(alias="$api_key", min_length=1)
    user_id: str | None = Field(None, alias="$user_id", min_length=1, max_length=200)
    session_id: str | None = Field(None, alias="$session_id")
    order_id: str | None = Field(None, alias="$order_id")
    transaction_id: str | None = Field(None, alias="$transaction_id")
    amount: int | list[str] | None = Field(
        None, alias="$amount", description="micros; a Decimal is sent as [\"<decimal>\"]")
    currency_code: str | None = Field(None, alias="$currency_code")
    billing_address: dict[str, Any] | None = Field(None, alias="$billing_address")
    shipping_address: dict[str, Any] | None = Field(None, alias="$shipping_address")
    payment_methods: list[dict[str, Any]] | None = Field(None, alias="$payment_methods")
    payment_method: dict[str, Any] | None = Field(None, alias="$payment_method")
    ip: str | None = Field(None, alias="$ip")
    browser: dict[str, Any] | None = Field(None, alias="$browser")
    transaction_type: str | None = Field(None, alias="$transaction_type")
    transaction_status: str | None = Field(None, alias="$transaction_status")


class SiftError(BaseModel):
    status: int = Field(description="Sift's status code: 51, 53, 55, 56, 60, 105, -1, -3")
    error_message: str
    error: str
    description: str


class ConfigRef(BaseModel):
    id: str
    version: str


class Entity(BaseModel):
    type: str
    id: str


class HistoryItem(BaseModel):
    app: str
    name: str
    state: Literal["running", "finished", "failed"]
    config: dict[str, Any]


class RouteInfo(BaseModel):
    name: str


class WorkflowStatus(BaseModel):
    id: str
    state: Literal["running", "finished", "failed"]
    config: ConfigRef
    config_display_name: str
    abuse_types: list[str]
    entity: Entity
    history: list[HistoryItem] = Field(description="newest first")
    route: RouteInfo | None = None


class Reason(BaseModel):
    name: str
    value: str


class Score(BaseModel):
    score: float
    reasons: list[Reason]


class ScoreResponse(BaseModel):
    status: int
    error_message: str
    user_id: str
    scores: dict[str, Score]
    latest_labels: dict[str, Any] = {}
    workflow_statuses: list[WorkflowStatus] | None = None
    actions: list[dict[str, Any]] | None = None


class EventReply(BaseModel):
    status: int
    error_message: str
    time: int
    score_response: ScoreResponse | None = None
    warnings: dict[str, Any] | None = None


class DecisionIn(BaseModel):
    decision_id: str
    source: Literal["MANUAL_REVIEW", "AUTOMATED_RULE", "CHARGEBACK"]
    analyst: str | None = None
    description: str | None = None
    time: int | None = None


class DecisionRef(BaseModel):
    id: str


class DecisionApplied(BaseModel):
    entity: Entity
    decision: DecisionRef
    time: int


class LatestDecision(BaseModel):
    decision: DecisionRef
    time: int
    webhook_succeeded: bool


class EntityDecisions(BaseModel):
    decisions: dict[str, LatestDecision]


class DecisionConfig(BaseModel):
    id: str
    name: str
    description: str
    entity_type: str
    abuse_type: str
    category: Literal["ACCEPT", "WATCH", "BLOCK"]
    webhook_url: str | None
    created_by: str
    updated_by: str


class DecisionPage(BaseModel):
    data: list[DecisionConfig]
    has_more: bool
    next_ref: str | None = None
