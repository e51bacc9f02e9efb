"""Effects returned by ``apply``: data describing I/O that only the leader performs.

Every effect is idempotent and can be rebuilt from state after a failover (``redrive``).
The two apply builds for every order (``Reply``, ``StoreRun``) have slots: no instance dict
each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request waiting for this entry (the API reads it from ``Applied.effects``).
    ``runs`` are the runs as apply left them (``runner.state.views.presented`` presents one)."""

    ok: bool
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    field: str | None = None
    result: Any = None


@dataclass(frozen=True)
class RunChanged:
    """A run moved (resumed, decided, timed out): wake anyone waiting on it. ``run`` as apply
    left it (never changed afterwards)."""

    run: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoreRun:
    """Write this version of the run to the run store. Holds the run as apply left it (never
    changed afterwards); the ``RunRecord`` dict is built only where the store is written."""

    run: dict[str, Any]

    @property
    def record(self) -> dict[str, Any]:
        from runner.state.views import record_of

        return record_of(self.run)


@dataclass(frozen=True)
class CallApp:
    """Call an app over HTTP; its answer comes back as an ``AppCompleted`` entry."""

    run_id: str
    node_id: str
    app: str  # the app's name; the executor maps it to a URL
    timeout_ms: int
    request: dict[str, Any]


@dataclass(frozen=True)
class EnqueueReview:
    """A review task appeared in the built-in review queue ``queue``."""

    run_id: str
    node_id: str
    queue: str


@dataclass(frozen=True)
class SendWebhook:
    """POST a signed webhook; ``effect_id`` is its idempotency key and outbox row."""

    effect_id: str
    url: str
    secret_ref: str | None
    payload: dict[str, Any]
