"""Effects returned by ``apply``: data describing I/O that only the leader performs.

Every effect is idempotent and can be rebuilt from state after a failover (``redrive``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson


class Docs(NamedTuple):
    """A run's event and metrics with their JSON (``orjson.Fragment``s: orjson writes them as
    they are, the same bytes as the objects'), made once by apply for all the runs of an
    order: the digest hashes them, the flusher stores them, the run store's record writes
    them. Readers check that a run still holds these very objects before using the JSON."""

    event: dict[str, Any]
    metrics: dict[str, Any]
    event_json: orjson.Fragment
    metrics_json: orjson.Fragment

    @classmethod
    def of(cls, event: dict[str, Any], metrics: dict[str, Any]) -> Docs:
        return cls(event, metrics, orjson.Fragment(orjson.dumps(event)),
                   orjson.Fragment(orjson.dumps(metrics)))


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class StoreRun:
    """Write this version of the run to the run store. Holds the run as apply left it (never
    changed afterwards); the ``RunRecord`` dict is built only where the store is written."""

    run: dict[str, Any]
    # The JSON of the run's event and metrics apply made (``Docs``), which the record's JSON
    # reuses; None: serialized from the run
    docs: Docs | None = field(default=None, compare=False, repr=False)

    @property
    def record(self) -> dict[str, Any]:
        from runner.state.views import record_of

        return record_of(self.run, self.docs)


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
