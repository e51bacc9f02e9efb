"""Exception handlers: user errors become 4xx naming the field; log errors become 503/504/429.

``render(exc)`` is the one place an error becomes a response: the handlers installed on the
FastAPI application and the hot path (``runner.api.hot``) both use it.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from replog.errors import AppendTimeout, NotLeader, Overloaded, ReplogError
from runner.api.responses import json_response
from runner.errors import NotFound, RequestInvalid, RunFinished

HANDLED = (RequestInvalid, NotFound, ReplogError)


def _detail(field: str, message: str, kind: str) -> dict:
    loc = ["body", *field.split(".")] if field else ["body"]
    return {"detail": [{"loc": loc, "msg": message, "type": kind}]}


def render(exc: Exception) -> Response:
    """The response for one of ``HANDLED``."""
    if isinstance(exc, RunFinished):
        body = _detail(exc.field, exc.message, "run_finished")
        body["run"] = {"run_id": exc.run_id, "state": exc.state, "decision": exc.decision}
        return json_response(body, status_code=409)
    if isinstance(exc, RequestInvalid):
        return json_response(_detail(exc.field, exc.message, "invalid"), status_code=exc.status)
    if isinstance(exc, NotFound):
        return json_response(_detail(exc.field, exc.message, "not_found"), status_code=404)
    status = 503
    if isinstance(exc, AppendTimeout):
        status = 504
    elif isinstance(exc, Overloaded):
        status = 429
    body = {"detail": str(exc) or type(exc).__name__, "error": type(exc).__name__}
    if isinstance(exc, NotLeader):
        body["leader_url"] = exc.leader_url
    return json_response(body, status_code=status, headers={"Retry-After": "1"})


def install(app: FastAPI) -> None:
    async def handler(_: Request, exc: Exception) -> Response:
        return render(exc)

    for kind in HANDLED:
        app.add_exception_handler(kind, handler)

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own handler echoes the input, which may hold NaN (not JSON: a 500) or
        # megabytes; the location and message name the field without it.
        detail = [{"loc": [p if isinstance(p, int) else str(p) for p in e.get("loc", ())],
                   "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        return json_response({"detail": detail}, status_code=422)
