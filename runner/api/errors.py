"""Exception handlers: user errors become 4xx naming the field; log errors become 503/504/429."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from replog.errors import AppendTimeout, NotLeader, Overloaded, ReplogError
from runner.api.responses import json_response
from runner.errors import NotFound, RequestInvalid


def _detail(field: str, message: str, kind: str) -> dict:
    loc = ["body", *field.split(".")] if field else ["body"]
    return {"detail": [{"loc": loc, "msg": message, "type": kind}]}


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestInvalid)
    async def invalid(_: Request, exc: RequestInvalid) -> Response:
        return json_response(_detail(exc.field, exc.message, "invalid"), status_code=exc.status)

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> Response:
        return json_response(_detail(exc.field, exc.message, "not_found"), status_code=404)

    @app.exception_handler(ReplogError)
    async def replog_error(_: Request, exc: ReplogError) -> Response:
        status = 503
        if isinstance(exc, AppendTimeout):
            status = 504
        elif isinstance(exc, Overloaded):
            status = 429
        body = {"detail": str(exc) or type(exc).__name__, "error": type(exc).__name__}
        if isinstance(exc, NotLeader):
            body["leader_url"] = exc.leader_url
        return json_response(body, status_code=status, headers={"Retry-After": "1"})
