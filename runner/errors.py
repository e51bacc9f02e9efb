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


class NotFound(LookupError):
    """The run, workflow, metric or task asked for does not exist (rendered as 404)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
