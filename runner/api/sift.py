"""The Sift-compatible routes (``runner.sift`` does the work); ``install(app)`` adds them.

Every reply is Sift's JSON: successes with ``status: 0``, failures with a non-2xx HTTP status
and Sift's status code (see ``runner.sift.codes``), never a FastAPI 422 or an HTML page. Ids in
``/v3`` paths may hold a percent-encoded "/" (Sift's clients encode every id): the routes match
the raw path and decode each id themselves.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPBasic, HTTPBasicCredentials

from replog.errors import AppendTimeout, Overloaded, ReplogError
from runner.api.responses import json_response
from runner.errors import NotFound, RequestInvalid
from runner.sift import models
from runner.sift.calls import SiftDoor
from runner.sift.codes import (
    BAD_API_KEY,
    BAD_VALUE,
    RATE_LIMITED,
    UNAVAILABLE,
    UNEXPECTED,
    SiftError,
)
from runner.sift.config import SiftSettings

log = logging.getLogger(__name__)

V3_PREFIX = "/v3/accounts/"
EVENT_VERSIONS = ("v205", "v204", "v203")


def _reply(exc: SiftError) -> Response:
    return json_response(exc.body(), status_code=exc.http_status, headers=exc.headers or None)


def _as_sift(exc: Exception) -> SiftError:
    """Any failure as Sift's error (the client raises ``ApiException`` with its status)."""
    if isinstance(exc, SiftError):
        return exc
    if isinstance(exc, RequestValidationError):
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        where = ".".join(str(p) for p in err.get("loc", ()))
        return SiftError(BAD_VALUE, f"{where}: {err.get('msg')}")
    if isinstance(exc, HTTPException):
        if exc.status_code == 401:
            return SiftError(BAD_API_KEY, str(exc.detail), 401, {"WWW-Authenticate": "Basic"})
        return SiftError(BAD_VALUE, str(exc.detail), exc.status_code)
    if isinstance(exc, NotFound):
        return SiftError(BAD_VALUE, exc.message, 404, title="Not found")
    if isinstance(exc, RequestInvalid):
        return SiftError(BAD_VALUE, f"{exc.field}: {exc.message}",
                         exc.status if exc.status in (404, 409) else 400)
    if isinstance(exc, Overloaded):
        return SiftError(RATE_LIMITED, "the node is overloaded", 429, {"Retry-After": "1"})
    if isinstance(exc, ReplogError):
        return SiftError(UNAVAILABLE, type(exc).__name__, 504 if isinstance(exc, AppendTimeout)
                         else 503, {"Retry-After": "1"})
    log.exception("sift request failed", exc_info=exc)
    return SiftError(UNEXPECTED, "", 500)


class SiftRoute(APIRoute):
    """A route whose every failure becomes Sift's JSON error."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # noqa: BLE001 - every failure gets Sift's JSON
                return _reply(_as_sift(exc))

        return guarded


_ERRORS = {code: {"model": models.SiftError} for code in (400, 401, 404, 429, 500, 503)}
router = APIRouter(route_class=SiftRoute, tags=["sift"], responses=_ERRORS)
_basic = HTTPBasic(auto_error=False, description="The API key as user name, empty password")


def _door(request: Request) -> SiftDoor:
    return request.app.state.sift


Door = Annotated[SiftDoor, Depends(_door)]


def _client(door: Door, account: str,
            creds: Annotated[HTTPBasicCredentials | None, Depends(_basic)]) -> str:
    if creds is None:
        raise SiftError(BAD_API_KEY, "HTTP Basic auth with the API key as user name", 401,
                        {"WWW-Authenticate": "Basic"})
    try:
        return door.authenticate(creds.username, unquote(account))
    except SiftError as exc:
        if exc.status == BAD_API_KEY:
            exc.http_status, exc.headers = 401, {"WWW-Authenticate": "Basic"}
        raise


Client = Annotated[str, Depends(_client)]
_Flag = Annotated[bool, Query()]


def _body_doc(model) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": model.model_json_schema(by_alias=True)}}}}


async def track(request: Request, door: Door, return_score: _Flag = False,
                return_action: _Flag = False, return_workflow_status: _Flag = False,
                return_route_info: _Flag = False, force_workflow_run: _Flag = False,
                abuse_types: Annotated[str | None, Query(max_length=1000)] = None,
                fields: Annotated[str | None, Query(max_length=1000)] = None):
    """Sift's Events API: the event runs the workflows bound to its mapped type (see
    docs/sift.md); with ``return_workflow_status`` the reply carries each run's decision.
    ``force_workflow_run`` is accepted: workflows always run."""
    flags = {"return_score": return_score, "return_action": return_action,
             "return_workflow_status": return_workflow_status,
             "return_route_info": return_route_info,
             "abuse_types": [a for a in (abuse_types or "").split(",") if a] or None,
             "fields": [f for f in (fields or "").split(",") if f]}
    return json_response(await door.track(await request.body(), flags))


for _version in EVENT_VERSIONS:
    router.add_api_route(f"/{_version}/events", track, methods=["POST"],
                         response_model=models.EventReply, name=f"sift_events_{_version}",
                         openapi_extra=_body_doc(models.SiftEventIn))


@router.get(V3_PREFIX + "{account}/workflows/runs/{run_id}",
            response_model=models.WorkflowStatus)
def workflow_status(account: str, run_id: str, door: Door, _: Client):
    """Sift's Workflow Status API: the run as in the events reply."""
    return json_response(door.workflow_status(unquote(run_id)))


@router.post(V3_PREFIX + "{account}/users/{user_id}/orders/{order_id}/decisions",
             response_model=models.DecisionApplied, openapi_extra=_body_doc(models.DecisionIn))
async def apply_order_decision(account: str, user_id: str, order_id: str, request: Request,
                               door: Door, _: Client):
    """Apply a decision to an order; ``MANUAL_REVIEW`` resolves the order's waiting review
    with the button ``decision_id`` names, and the run resumes."""
    entity = {"type": "order", "id": unquote(order_id)}
    return json_response(await door.apply_decision(entity, unquote(user_id),
                                                   await request.body()))


@router.post(V3_PREFIX + "{account}/users/{user_id}/decisions",
             response_model=models.DecisionApplied, openapi_extra=_body_doc(models.DecisionIn))
async def apply_user_decision(account: str, user_id: str, request: Request, door: Door,
                              _: Client):
    """Apply a decision to a user; ``MANUAL_REVIEW`` resolves the user's waiting reviews."""
    user = unquote(user_id)
    return json_response(await door.apply_decision({"type": "user", "id": user}, user,
                                                   await request.body()))


@router.get(V3_PREFIX + "{account}/orders/{order_id}/decisions",
            response_model=models.EntityDecisions)
def order_decisions(account: str, order_id: str, door: Door, _: Client):
    """The order's latest decision per abuse type."""
    return json_response(door.order_decisions(unquote(order_id)))


@router.get(V3_PREFIX + "{account}/users/{user_id}/decisions",
            response_model=models.EntityDecisions)
def user_decisions(account: str, user_id: str, door: Door, _: Client):
    """The user's latest decision per abuse type (from the run store)."""
    return json_response(door.user_decisions(unquote(user_id)))


@router.get(V3_PREFIX + "{account}/decisions", response_model=models.DecisionPage)
def decisions(account: str, request: Request, door: Door, _: Client,
              entity_type: Annotated[str | None, Query(max_length=20)] = None,
              abuse_types: Annotated[str | None, Query(max_length=1000)] = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              start: Annotated[int, Query(alias="from", ge=0, le=1_000_000)] = 0):
    """The decisions the active workflows can reach, paged with ``from`` and ``limit``."""
    page, more = door.decision_configs(
        entity_type, [a for a in (abuse_types or "").split(",") if a] or None, limit, start)
    next_ref = None
    if more:
        next_ref = str(request.url.include_query_params(**{"from": start + limit,
                                                           "limit": limit}))
    return json_response({"data": page, "has_more": more, "next_ref": next_ref})


_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


async def not_served(rest: str):
    """Sift endpoints Railflow does not serve (score, labels, verification, PSP merchants,
    session and content decisions) answer Sift's JSON, not a bare 404."""
    raise SiftError(BAD_VALUE, "see docs/sift.md", 404, title="Endpoint not served by Railflow")


for _prefix in (*EVENT_VERSIONS, "v3", "v1/verification"):
    router.add_api_route(f"/{_prefix}/{{rest:path}}", not_served, methods=_ALL_METHODS,
                         include_in_schema=False, name=f"sift_not_served_{_prefix}")


class RawIdsMiddleware:
    """For ``/v3/accounts/`` paths, route on the raw (still percent-encoded) path so an id
    holding "%2F" stays one path segment; the handlers decode the ids."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(V3_PREFIX):
            raw = scope.get("raw_path")
            if raw:
                path = raw.decode("latin-1").split("?", 1)[0]
                if path.startswith(V3_PREFIX):
                    scope = dict(scope, path=path)
        await self.app(scope, receive, send)


def install(app: FastAPI, cfg: SiftSettings | None = None) -> None:
    """Serve the Sift API on ``app`` (whose ``state.service`` is the node's ``Service``)."""
    app.state.sift = SiftDoor(app.state.service, cfg or SiftSettings())
    app.include_router(router)
    app.add_middleware(RawIdsMiddleware)
