"""Dependencies: the node's ``Service`` and the caller's identity (``Annotated`` aliases).

They are ``async def``: FastAPI runs a plain ``def`` dependency on its threadpool, one hop per
dependency and request; these do no blocking work (the principal comes from a cache).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from runner import signing
from runner.auth import Principal
from runner.service import Service

internal_signature_age_ms_max = 30_000

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


async def internal_caller(request: Request, svc: Svc,
                          creds: Annotated[HTTPAuthorizationCredentials | None,
                                           Depends(_bearer)]) -> str:
    """``/internal/*``: a request signed with the cluster secret (``signing.internal_headers``),
    or an admin's console token. Returns who called."""
    header = request.headers.get(signing.HEADER)
    if header is not None:
        body = await request.body()
        message = signing.internal_message(request.method, request.url.path, body)
        if signing.verify(svc.settings.resolved_cluster_secret(), message, header,
                          time.time_ns() // 1_000_000, internal_signature_age_ms_max):
            return "cluster"
        raise HTTPException(401, "wrong or stale cluster signature")
    principal = svc.auth.principal(creds.credentials) if creds and creds.credentials else None
    if principal is not None and principal.has_role("admin"):
        return principal.name
    raise HTTPException(401, "requires the cluster signature or an admin token",
                        headers={"WWW-Authenticate": "Bearer"})


Internal = Annotated[str, Depends(internal_caller)]
