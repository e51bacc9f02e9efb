"""Errors of the workflows package.

``Problem`` is one finding of validation; ``WorkflowInvalid`` carries all of them at once so a
caller (the console, the publish API) can show every problem in one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


def is_engine_error(e: BaseException) -> bool:
    """True for what CEL compilation or evaluation may raise on bad input or data, including a
    Rust panic (PyO3 raises ``PanicException``, a BaseException); never for interrupts."""
    return isinstance(e, Exception) or type(e).__name__ == "PanicException"


class InvariantViolation(RuntimeError):
    """A condition the code relies on does not hold: a bug, never a user error."""


class Problem(BaseModel):
    """One validation finding, located by node and edge id where it applies."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    node_id: str | None = None
    edge_id: str | None = None
    span: tuple[int, int] | None = None  # [start, end) characters of the edge's criterion

    def __str__(self) -> str:
        where = "/".join(x for x in (self.node_id, self.edge_id) if x)
        return f"[{self.code}] {where + ': ' if where else ''}{self.message}"


class WorkflowInvalid(ValueError):
    """Raised by publish/compile with every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]):
        if not problems:
            raise InvariantViolation("WorkflowInvalid needs at least one problem")
        self.problems: list[Problem] = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"workflow is invalid ({len(self.problems)} problems):\n{lines}")


class UnknownNode(LookupError):
    """A step or lookup named a node the workflow version does not have."""


class UnknownVersion(LookupError):
    """A store lookup named a workflow or version that was never published."""
