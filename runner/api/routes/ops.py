"""Health, Prometheus metrics, console login, the demo scoring app and the forwarding endpoint."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from replog.errors import ReplogError
from runner import forwarder, signing
from runner import operations as ops
from runner.api.deps import Admin, Svc
from runner.api.models import HealthPublic, ScorePublic, ScoreRequest, TokenPublic, TokenRequest
from runner.scoring import demo_score

router = APIRouter()


@router.get("/healthz", response_model=HealthPublic, tags=["ops"])
def healthz(svc: Svc):
    node = svc.node
    status = "diverged" if svc.diverged else "ok" if svc.ready() else "starting"
    return {"status": status, "node_id": svc.settings.node_id,
            "role": node.role.value, "leader_url": node.leader_url(),
            "applied_offset": node.applied_offset,
            "diverged_offsets": [d["offset"] for d in svc.diverged]}


@router.get("/metrics", tags=["ops"], response_class=Response)
def metrics(svc: Svc):
    """Prometheus text format."""
    return Response(generate_latest(svc.telemetry.registry), media_type=CONTENT_TYPE_LATEST)


@router.post("/v1/auth/token", response_model=TokenPublic, tags=["auth"])
def token(body: TokenRequest, svc: Svc):
    """Log a console user in; use the token as ``Authorization: Bearer <token>``."""
    issued = svc.auth.login(body.username, body.password)
    if issued is None:
        raise HTTPException(401, "wrong username or password")
    return {"access_token": issued, "role": svc.auth.user_for_token(issued).role}


@router.post("/demo/score", response_model=ScorePublic, tags=["demo"])
def score(body: ScoreRequest):
    """The demo scoring app: a deterministic score 0..100 for the order in ``event.data``."""
    data = body.event.get("data", body.event) if isinstance(body.event, dict) else {}
    value = float(demo_score(data if isinstance(data, dict) else {}))
    return {"result": {"payment_abuse": value, "score": value}}


@router.post(forwarder.PATH, include_in_schema=False)
async def forwarded(request: Request, svc: Svc,
                    railflow_signature: Annotated[str | None, Header()] = None):
    body = await request.body()
    if not signing.verify(svc.settings.cluster_secret, body, railflow_signature, ops._now_ms()):
        raise HTTPException(401, "bad signature")
    kind, payload, timeout_s = forwarder.decode_request(body)
    if not svc.node.is_leader:
        return Response(forwarder.error_body(_not_leader(svc)), status_code=503,
                        media_type="application/json")
    try:
        import asyncio

        applied = await asyncio.wrap_future(svc._submit_raw(kind, payload, timeout_s))
    except ReplogError as exc:
        return Response(forwarder.error_body(exc), status_code=503,
                        media_type="application/json")
    return Response(forwarder.encode_applied(applied), media_type="application/json")


def _not_leader(svc) -> ReplogError:
    from replog.errors import NotLeader

    return NotLeader("not the leader", svc.node.leader_url())


__all__ = ["router"]


@router.post("/internal/v1/round-trip", include_in_schema=False)
def round_trip(svc: Svc):
    """The log round trips (append → applied) this node timed as leader since the last call,
    as a base64 HdrHistogram of microseconds; the call starts a new histogram."""
    hist = svc.round_trip.take()
    return {"node_id": svc.settings.node_id, "count": hist.get_total_count(),
            "hdr": hist.encode().decode()}


@router.get("/internal/v1/rejections", include_in_schema=False)
def rejections(svc: Svc, _: Admin, limit: int = 100):
    """The entries this node's apply rejected, newest first (the same on every replica)."""
    log = svc.sm.rejections
    counts = [{"kind": k, "reason": r, "count": n} for (k, r), n in sorted(log.counts.items())]
    return {"node_id": svc.settings.node_id, "counts": counts,
            "recent": log.recent(max(1, min(limit, 1000)))}
