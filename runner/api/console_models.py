"""Response models of the console's API additions (problems, scopes, identity)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ProblemPublic(BaseModel):
    """One validation finding where it happens: on a node, an edge, or the whole workflow."""

    code: str
    message: str
    node_id: str | None = None
    edge_id: str | None = None
    span: tuple[int, int] | None = Field(
        default=None, description="[start, end) characters of the edge's criterion")


class CheckPublic(BaseModel):
    valid: bool
    problems: list[ProblemPublic]
    scopes: dict[str, dict[str, Any]] = Field(
        description="Node id -> what criteria on its edges may read: {event, scores, metrics, "
                    "apps}, each field -> CEL type (apps nest one level per node)")


class MePublic(BaseModel):
    name: str
    kind: Literal["user", "client"]
    role: Literal["analyst", "manager", "admin"] | None
