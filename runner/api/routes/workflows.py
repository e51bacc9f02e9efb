"""Workflows: create, edit the draft, validate, publish, versions, diff, rollback."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from runner import operations as ops
from runner.api.deps import Analyst, Manager, Svc
from runner.api.models import (
    DraftPublic,
    PublishResult,
    RollbackIn,
    ValidationPublic,
    VersionPublic,
    WorkflowPublic,
)
from runner.state import queries
from runner.state.etags import draft_etag
from workflows import Workflow, WorkflowDiff

router = APIRouter(prefix="/v1/workflows", tags=["workflows"])

WorkflowCreate = Workflow  # the console sends the whole workflow


@router.get("", response_model=list[WorkflowPublic])
def list_workflows(svc: Svc, _: Analyst):
    return ops._read(svc, queries.workflows)


@router.post("", response_model=DraftPublic, status_code=201)
async def create_workflow(body: WorkflowCreate, svc: Svc, user: Manager):
    return await ops.save_draft(svc, body.id, body.model_dump(mode="json"), user.name, True)


_etag = draft_etag  # the draft's entity tag: a hash of its canonical JSON


@router.get("/{workflow_id}/draft", response_model=DraftPublic)
def get_draft(workflow_id: str, svc: Svc, _: Analyst, response: Response):
    """The draft, with an ``ETag`` to send back as ``If-Match`` when saving it."""
    draft = ops.get_draft(svc, workflow_id)
    response.headers["ETag"] = _etag(draft["definition"])
    return draft


@router.put("/{workflow_id}/draft", response_model=DraftPublic,
            responses={409: {"description": "If-Match names an older draft"}})
async def edit_draft(workflow_id: str, body: WorkflowCreate, svc: Svc, user: Manager,
                     response: Response,
                     if_match: Annotated[str | None, Header(max_length=200)] = None):
    """Replace the draft. With ``If-Match`` (the ETag read), a draft changed meanwhile by
    someone else answers 409 and is left as it is."""
    expected = None if if_match is None or if_match.strip() == "*" else if_match.strip()
    saved = await ops.save_draft(svc, workflow_id, body.model_dump(mode="json"), user.name,
                                 False, if_match=expected)
    response.headers["ETag"] = _etag(saved["definition"])
    return saved


@router.post("/validate", response_model=ValidationPublic)
def validate(body: WorkflowCreate, svc: Svc, _: Analyst):
    """Every problem of a workflow (graph, criteria, metrics), without saving it."""
    return ops.validate(svc, body.model_dump(mode="json"))


@router.post("/{workflow_id}/publish", response_model=PublishResult)
async def publish(workflow_id: str, svc: Svc, user: Manager):
    """Publish the draft as the next version; new events run it at once."""
    return await ops.publish(svc, workflow_id, user.name)


@router.get("/{workflow_id}/versions", response_model=list[VersionPublic])
def versions(workflow_id: str, svc: Svc, _: Analyst):
    return ops.versions(svc, workflow_id)


@router.get("/{workflow_id}/versions/{version}", response_model=Workflow)
def version(workflow_id: str, version: int, svc: Svc, _: Analyst):
    return ops.version(svc, workflow_id, version)


@router.get("/{workflow_id}/diff", response_model=WorkflowDiff)
def diff(workflow_id: str, svc: Svc, _: Analyst,
         from_version: Annotated[int, Query(alias="from", ge=1)],
         to_version: Annotated[int | None, Query(alias="to", ge=1)] = None):
    """Changes from version ``from`` to version ``to`` (the draft when ``to`` is absent)."""
    return ops.diff(svc, workflow_id, from_version, to_version)


@router.post("/{workflow_id}/rollback", response_model=PublishResult)
async def rollback(workflow_id: str, body: RollbackIn, svc: Svc, user: Manager):
    """Publish an older version's content again, as the newest version."""
    return await ops.rollback(svc, workflow_id, body.version, user.name)
