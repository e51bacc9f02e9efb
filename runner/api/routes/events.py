"""Events and runs: the synchronous decision API used by client systems.

``POST /v1/events`` and ``POST /v1/runs/{run_id}/apps/{node_id}`` are served by
``runner.api.hot`` whenever it can; these routes are the reference it falls back to (and the
OpenAPI document). A check added to either must live in ``runner.operations`` or
``runner.limits``, which both paths call, or the hot path will not make it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request

from runner import operations as ops
from runner import signing
from runner.api.deps import Client, Reader, Svc
from runner.api.models import AppResultIn, EventIn, EventResult, RunPublic
from runner.api.responses import json_response
from runner.errors import RequestInvalid

router = APIRouter(prefix="/v1", tags=["events"])


@router.post("/events", response_model=EventResult)
async def post_event(event: EventIn, svc: Svc, _: Client,
                     deadline_ms: Annotated[int | None, Query(ge=1, le=30_000)] = None):
    """Start one run per published workflow bound to the event's type and answer with each
    run's state, decision, path and why, once decided (or waiting for review) or at
    ``deadline_ms``. A repeated ``event_id`` answers with the same runs."""
    result = await ops.receive_event(svc, event.model_dump(), deadline_ms)
    return json_response(result)


@router.get("/runs/{run_id}", response_model=RunPublic)
def get_run(run_id: str, svc: Svc, _: Reader):
    return json_response(ops.get_run(svc, run_id))


@router.get("/runs", response_model=list[RunPublic])
def find_runs(svc: Svc, _: Reader,
              by: Annotated[Literal["order", "card", "customer"], Query()],
              value: Annotated[str, Query(min_length=1, max_length=200)],
              limit: Annotated[int, Query(ge=1, le=1000)] = 100):
    """Runs in the run store by order id, card or customer."""
    return json_response(ops.lookup_runs(svc, by, value, limit))


@router.get("/events/{event_id}/runs", response_model=list[RunPublic])
def event_runs(event_id: str, svc: Svc, _: Reader):
    """The runs of an event: from the hot state while dedup holds it, then from the run
    store by event id (every sighting's runs, oldest first)."""
    return json_response(ops.event_runs(svc, event_id))


@router.post("/runs/{run_id}/apps/{node_id}", response_model=RunPublic, tags=["apps"])
async def app_callback(run_id: str, node_id: str, request: Request, svc: Svc,
                       railflow_signature: Annotated[str | None, Header()] = None):
    """An app's answer for the run waiting at ``node_id`` (an app or score node; reviews are
    decided through the review API). Header ``Railflow-Signature: t=<ms>,v1=<hex
    HMAC-SHA256 of "<t>.<run_id>/<node_id>\\n<body>">`` with the app's secret."""
    body = await request.body()
    secret = ops.app_secret(svc, run_id, node_id)
    if not signing.verify(secret, signing.callback_message(run_id, node_id, body),
                          railflow_signature, now_ms=ops._now_ms()):
        raise RequestInvalid("Railflow-Signature", "missing, stale or wrong signature", 401)
    try:
        parsed = AppResultIn.model_validate_json(body)
    except ValueError as exc:
        raise RequestInvalid("result", " ".join(str(exc).split())) from None
    return json_response(await ops.app_completed(svc, run_id, node_id, parsed.result))
