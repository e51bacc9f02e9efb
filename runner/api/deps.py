"""Dependencies: the node's ``Service`` and the caller's identity (``Annotated`` aliases).

They are ``async def``: FastAPI runs a plain ``def`` dependency on its threadpool, one hop per
dependency and request; these do no blocking work (the principal comes from a cache).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from runner.auth import Principal
from runner.service import Service

_bearer = HTTPBearer(auto_error=False, description="A client API key or a console token")


async def get_service(request: Request) -> Service:
    return request.app.state.service


Svc = Annotated[Service, Depends(get_service)]


async def _principal(svc: Svc, creds: Annotated[HTTPAuthorizationCredentials | None,
                                          Depends(_bearer)]) -> Principal:
    if creds is None or not creds.credentials:
        raise HTTPException(401, "missing Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})
    principal = svc.auth.principal(creds.credentials)
    if principal is None:
        raise HTTPException(401, "unknown or expired key", headers={"WWW-Authenticate": "Bearer"})
    return principal


def allow(*who: str):
    """Allow client keys (``"client"``) and/or console users with at least one of the roles."""

    async def check(p: Annotated[Principal, Depends(_principal)]) -> Principal:
        if p.kind == "client" and "client" in who:
            return p
        if p.kind == "user" and any(p.has_role(r) for r in who if r != "client"):
            return p
        raise HTTPException(403, f"requires one of: {', '.join(who)}")

    return check


Client = Annotated[Principal, Depends(allow("client", "admin"))]
Reader = Annotated[Principal, Depends(allow("client", "analyst"))]
Analyst = Annotated[Principal, Depends(allow("analyst"))]
Manager = Annotated[Principal, Depends(allow("manager"))]
Admin = Annotated[Principal, Depends(allow("admin"))]
