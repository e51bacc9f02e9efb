"""Health, Prometheus metrics, console login, the demo scoring app and the internal endpoints.

``/internal/*`` answers only callers holding the cluster secret (or an admin token);
``/demo/score`` exists only where the demo scorer is enabled (embedded demo mode by default)
and answers a client key or an app-signed request.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from replog.errors import NotLeader, ReplogError
from runner import forwarder, gcpolicy, signing
from runner import operations as ops
from runner.api.deps import Admin, Internal, Svc, _bearer
from runner.api.models import HealthPublic, ScorePublic, ScoreRequest, TokenPublic, TokenRequest
from runner.auth import Throttled
from runner.scoring import demo_score

router = APIRouter()


@router.get("/healthz", response_model=HealthPublic, tags=["ops"])
def healthz(svc: Svc):
    node = svc.node
    status = "diverged" if svc.diverged else "ok" if svc.ready() else "starting"
    return {"status": status, "node_id": svc.settings.node_id,
            "role": node.role.value, "leader_url": node.leader_url(),
            "applied_offset": node.applied_offset,
            "runs_awaiting_store": svc.runs_awaiting_store(),
            "diverged_offsets": [d["offset"] for d in svc.diverged],
            "problems": node.problems() + svc.problems()}


@router.get("/metrics", tags=["ops"], response_class=Response)
def metrics(svc: Svc):
    """Prometheus text format."""
    return Response(generate_latest(svc.telemetry.registry), media_type=CONTENT_TYPE_LATEST)


@router.post("/v1/auth/token", response_model=TokenPublic, tags=["auth"])
def token(body: TokenRequest, svc: Svc, request: Request):
    """Log a console user in; use the token as ``Authorization: Bearer <token>``. Repeated
    failures for one user or from one address answer 429 for a while."""
    address = request.client.host if request.client else ""
    try:
        issued = svc.auth.login(body.username, body.password, address)
    except Throttled as exc:
        raise HTTPException(429, str(exc),
                            headers={"Retry-After": str(int(exc.retry_after_s) + 1)}) from None
    if issued is None:
        raise HTTPException(401, "wrong username or password")
    return {"access_token": issued, "role": svc.auth.user_for_token(issued).role}


@router.post("/demo/score", response_model=ScorePublic, tags=["demo"])
async def score(body: ScoreRequest, svc: Svc, request: Request,
                creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None):
    """The demo scoring app: a deterministic score 0..100 for the order in ``event.data``.
    Needs a client key, or the app signature the runner puts on its app calls."""
    if not svc.settings.demo_scorer_enabled:
        raise HTTPException(404, "the demo scorer is not enabled on this node")
    principal = svc.auth.principal(creds.credentials) if creds and creds.credentials else None
    signed = signing.verify(svc.settings.app_secret, await request.body(),
                            request.headers.get(signing.HEADER), ops._now_ms())
    if not signed and (principal is None or principal.kind != "client"):
        raise HTTPException(401, "requires a client key or an app signature",
                            headers={"WWW-Authenticate": "Bearer"})
    data = body.event.get("data", body.event) if isinstance(body.event, dict) else {}
    value = float(demo_score(data if isinstance(data, dict) else {}))
    return {"result": {"payment_abuse": value, "score": value}}


@router.post(forwarder.PATH, include_in_schema=False)
async def forwarded(request: Request, svc: Svc,
                    railflow_signature: Annotated[str | None, Header()] = None):
    """A follower's submission, signed with the cluster secret for this leader's term."""
    body = await request.body()
    node = svc.node
    try:
        kind, payload, timeout_s = forwarder.check_forwarded(
            svc.settings.resolved_cluster_secret(), svc.replay_guard, body, railflow_signature,
            ops._now_ms(), node.my_writer_id if node.is_leader else None)
    except PermissionError as exc:
        raise HTTPException(401, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    except NotLeader:
        return Response(forwarder.error_body(NotLeader("not the leader", node.leader_url())),
                        status_code=503, media_type="application/json")
    except forwarder.WrongTerm as exc:
        return Response(forwarder.wrong_term_body(exc), status_code=409,
                        media_type="application/json")
    try:
        applied = await asyncio.wrap_future(svc._submit_raw(kind, payload, timeout_s))
    except ReplogError as exc:
        return Response(forwarder.error_body(exc), status_code=503,
                        media_type="application/json")
    return Response(forwarder.encode_applied(applied), media_type="application/json")


__all__ = ["router"]


@router.get("/internal/v1/digests", include_in_schema=False)
def digests(svc: Svc, _: Internal):
    """The state digests this node computed at checkpoint offsets (newest last), and the
    offsets where they differed from another replica's."""
    items = list(svc.checkpointer.digests.items())
    return {"node_id": svc.settings.node_id,
            "digests": [{"offset": o, "digest": d} for o, d in items],
            "diverged": svc.diverged}


@router.post("/internal/v1/round-trip", include_in_schema=False)
def round_trip(svc: Svc, _: Internal):
    """The log round trips (append → applied) this node timed as leader since the last call,
    as a base64 HdrHistogram of microseconds, the cyclic collector's runs over the same time
    (``runner.gcpolicy.collections``) and, with ``gil_watch_ms`` set, how late a thread got
    to run Python (``runner.gilwatch``, a histogram of µs); the call starts new ones."""
    hist = svc.round_trip.take()
    gil = svc.gil_watch.take().encode().decode() if svc.gil_watch is not None else None
    return {"node_id": svc.settings.node_id, "count": hist.get_total_count(),
            "hdr": hist.encode().decode(), "collections": gcpolicy.collections.take(),
            "gil_wait_hdr": gil}


@router.get("/internal/v1/threads", include_in_schema=False)
def threads(_: Internal):
    """This process's id and its Python threads' kernel ids and names: the key from a thread
    in ``/proc/<pid>/task`` (CPU, run-queue wait) to what it does (``bench/census.py``)."""
    return {"pid": os.getpid(),
            "threads": [{"id": t.native_id, "name": t.name} for t in threading.enumerate()
                        if t.native_id is not None]}


@router.get("/internal/v1/rejections", include_in_schema=False)
def rejections(svc: Svc, _: Admin, limit: int = 100):
    """The entries this node's apply rejected, newest first (the same on every replica)."""
    log = svc.sm.rejections
    counts = [{"kind": k, "reason": r, "count": n} for (k, r), n in sorted(log.counts.items())]
    return {"node_id": svc.settings.node_id, "counts": counts,
            "recent": log.recent(max(1, min(limit, 1000)))}
