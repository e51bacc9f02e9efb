"""The kinds of log entries the runner appends, and their payloads (orjson-encoded dicts).

The leader stamps ``entry.ts``; payloads never carry the time that apply uses.
"""

from __future__ import annotations

from typing import Any

import orjson

EVENT_RECEIVED = "EventReceived"  # {event_id, type, ts?, data}
APP_COMPLETED = "AppCompleted"  # {run_id, node_id, result}
TICK = "Tick"  # {}  (expires app tasks whose deadline_ts <= entry.ts)
WORKFLOW_DRAFT_SAVED = "WorkflowDraftSaved"  # {workflow_id, definition, by}
WORKFLOW_PUBLISHED = "WorkflowPublished"  # {workflow_id, definition?, by}  (draft if absent)
WORKFLOW_ROLLED_BACK = "WorkflowRolledBack"  # {workflow_id, version, by}
METRIC_DEFINED = "MetricDefined"  # {text}
METRIC_DROPPED = "MetricDropped"  # {name}
REVIEW_CLAIMED = "ReviewClaimed"  # {run_id, node_id, user, ttl_ms?, release?, override?}
REVIEW_DECIDED = "ReviewDecided"  # {run_id, node_id, user, outcome, override, reason?}
EFFECTS_DONE = "EffectsDone"  # {stored: [[run_id, offset]], outbox: [effect_id]}
LEADER_STARTED = "replog.LeaderStarted"  # appended by replog; apply re-drives effects

KINDS = frozenset({EVENT_RECEIVED, APP_COMPLETED, TICK, WORKFLOW_DRAFT_SAVED, WORKFLOW_PUBLISHED,
                   WORKFLOW_ROLLED_BACK, METRIC_DEFINED, METRIC_DROPPED, REVIEW_CLAIMED,
                   REVIEW_DECIDED, EFFECTS_DONE})


def encode(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload)


def decode(raw: bytes, kind: str = "") -> dict[str, Any]:
    if kind.startswith("replog."):
        return {}  # replog's own binary payloads
    value = orjson.loads(raw) if raw else {}
    if not isinstance(value, dict):
        raise ValueError("entry payload must be a JSON object")
    return value
