"""Errors of the replicated log.

Callers see ``NotLeader`` (retry on the leader), ``Fenced`` (a newer leader wrote first: the
request was not acknowledged and may or may not be applied), ``AppendTimeout`` (indeterminate),
``Overloaded`` (queue full: shed load) and ``AppendFailed`` (the log refused the entry).
``LogTruncated`` stops a node whose log lost the entries it needs to replay.
``InvariantViolation`` marks a bug and stays on under ``python -O``, unlike ``assert``.
"""

from __future__ import annotations


class ReplogError(Exception):
    """Base of every error a caller of ``Node.submit`` can receive."""


class InvariantViolation(RuntimeError):
    """A condition the code relies on does not hold: a bug, never a user error."""


class NotLeader(ReplogError):
    """This node does not lead (any more); ``leader_url`` says where to go, when known."""

    def __init__(self, message: str = "not the leader", leader_url: str | None = None):
        super().__init__(message)
        self.leader_url = leader_url


class Fenced(ReplogError):
    """A newer writer appeared in the log; this node's pending requests are not acknowledged."""


class AppendTimeout(ReplogError, TimeoutError):
    """The entry was not applied in time; it may still be applied later (indeterminate)."""


class Overloaded(ReplogError):
    """The bounded request queue is full."""


class AppendFailed(ReplogError):
    """The log adapter reported a failed append; the entry may still be in the log."""


class LogTruncated(ReplogError):
    """The log no longer holds the offsets this node must replay (retention deleted them):
    replaying from further on would silently diverge, so the node refuses to start."""


def require(condition: bool, message: str) -> None:
    """Raise ``InvariantViolation`` unless ``condition`` holds."""
    if not condition:
        raise InvariantViolation(message)
