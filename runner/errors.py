"""Errors of the runner. ``InvariantViolation`` stays on in production, unlike ``assert``."""


class InvariantViolation(RuntimeError):
    """A condition the code relies on does not hold: a bug, never a user error."""


class RequestInvalid(ValueError):
    """A request names something wrong; ``field`` says which input (rendered as a 4xx)."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


class RunFinished(RequestInvalid):
    """An app answer or review action for a run that finished and left the hot state: it was
    stored with its decision and takes no more answers (rendered as 409 with the run)."""

    def __init__(self, run_id: str, state: str, decision: str | None) -> None:
        outcome = f" with decision {decision}" if decision else ""
        super().__init__("run_id", f"run {run_id} finished{outcome} and was stored; it takes "
                         f"no more answers (read it at GET /v1/runs/{run_id})", 409)
        self.run_id, self.state, self.decision = run_id, state, decision


class NotFound(LookupError):
    """The run, workflow, metric or task asked for does not exist (rendered as 404)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
