"""What the console needs beyond the client API: who is signed in, and structured problems
with the scope of every edge for the workflow editor (no log entry: a pure check)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from runner import operations as ops
from runner.api.console_models import CheckPublic, MePublic
from runner.api.deps import Analyst, Svc, allow
from runner.auth import Principal
from runner.state import queries
from workflows import Workflow, validate
from workflows.completion import node_scopes

router = APIRouter(tags=["console"])

Anyone = Annotated[Principal, Depends(allow("client", "analyst"))]


@router.get("/v1/auth/me", response_model=MePublic, tags=["auth"])
def me(who: Anyone):
    """The caller: a console user with its role, or a client system."""
    return {"name": who.name, "kind": who.kind, "role": who.role}


@router.post("/v1/workflows/check", response_model=CheckPublic, tags=["workflows"])
def check(body: Workflow, svc: Svc, _: Analyst):
    """Every problem of a workflow, each on its node or edge with the character span of a
    criterion's error, and what criteria may read at each node; nothing is saved."""
    known = [m["name"] for m in ops._read(svc, queries.metrics)]
    problems = [p.model_dump() for p in validate(body, known_metrics=known)]
    return {"valid": not problems, "problems": problems,
            "scopes": node_scopes(body, known_metrics=known)}
