"""How Sift's vocabulary maps onto this node's workflows (``RAILFLOW_SIFT_*`` variables).

Dict and list settings are JSON in the environment, e.g.
``RAILFLOW_SIFT_EVENT_TYPES='{"$create_order": "order", "$transaction": "order"}'``.
docs/sift.md describes each setting.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SiftSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAILFLOW_SIFT_", extra="ignore")

    # Sift $type -> Railflow event type. Unlisted reserved types "$x" become "sift_x";
    # custom types keep their name.
    event_types: dict[str, str] = Field(default_factory=lambda: {
        "$create_order": "order", "$update_order": "order_update", "$transaction": "order"})
    # Sift $type -> the field that names the event once (its dedup key). Events of other
    # types are named by a digest of their body: a retried identical body is one event.
    id_fields: dict[str, str] = Field(default_factory=lambda: {
        "$create_order": "$order_id", "$update_order": "$order_id",
        "$transaction": "$transaction_id"})
    # workflow id -> the abuse types it decides for ("*" is every other workflow).
    workflow_abuse_types: dict[str, list[str]] = Field(
        default_factory=lambda: {"*": ["payment_abuse"]})
    # abuse type -> the run score (``scores.<name>``) reported as its Sift score.
    abuse_scores: dict[str, str] = Field(default_factory=lambda: {
        "payment_abuse": "payment_abuse"})
    score_scale: float = 100.0  # Railflow scores run 0..100; Sift's 0..1
    # Sift decision id -> review outcome, for ids that are not an outcome's own name.
    decision_outcomes: dict[str, str] = Field(default_factory=dict)
    # The merchant recorded for events that name none ($seller_user_id or a custom field).
    default_merchant: str = "site"
    # Only this account id is served when set; any account otherwise.
    account_id: str | None = None
    # Requests per second per API key on this node; 0 turns the limit off.
    rate_limit_per_s: float = 0.0
    rate_limit_burst: int = 50

    def abuse_types_of(self, workflow_id: str) -> list[str]:
        return self.workflow_abuse_types.get(
            workflow_id, self.workflow_abuse_types.get("*", ["payment_abuse"]))
