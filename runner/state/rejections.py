"""Rejected entries: the one way an entry fails to apply, on every replica alike.

``Rejected`` is raised by a handler for a well-formed entry it cannot apply (unknown workflow,
a bad metric text, an event field the metrics engine cannot take): the request gets a 4xx
naming ``field``. Any other exception a handler raises (a panic in native code too, which PyO3
raises as a BaseException) is a bug, not a reason to stop the log for everyone: ``apply``
rejects the entry the same way (state and digest unchanged, the caller gets a 422) and
records it here, as it records every rejection. Failures of this node's own environment (a
full disk, out of memory) are not rejections: they stop the node (``LOCAL_FAILURES``),
because the other replicas did not see them.

Operators read ``RejectionLog.recent()`` (``GET /internal/v1/rejections``) and the counter
``railflow_entries_rejected`` (labels: kind, reason ``invalid`` or ``internal``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

import duckdb

log = logging.getLogger(__name__)

rejections_kept_max = 1_000
error_chars_max = 300

# This node's environment failed, not the entry: the node must stop (and replay after repair).
LOCAL_FAILURES: tuple[type[BaseException], ...] = (
    OSError, MemoryError, duckdb.IOException, duckdb.OutOfMemoryException,
    duckdb.FatalException, duckdb.InternalException)


class Rejected(Exception):
    """The entry is well-formed but cannot be applied; the request gets a 4xx naming ``field``."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.field, self.message, self.status = field, message, status


@dataclass(frozen=True)
class Rejection:
    offset: int
    kind: str
    ts: int
    field: str
    status: int
    error: str
    reason: str  # "invalid" (a Rejected) or "internal" (an unexpected exception: a bug)


def internal(exc: BaseException) -> Rejected:
    """The rejection of an entry whose apply raised ``exc`` unexpectedly."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:error_chars_max]
    return Rejected(getattr(exc, "field", None) or "payload",
                    f"could not be applied ({text}); rejected on every node", 422)


class RejectionLog:
    """The last ``rejections_kept_max`` rejections of this node and counts by (kind, reason).

    Not part of the replicated state (a rejected entry leaves the digest unchanged); every
    replica records the same rejections because apply is deterministic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: deque[Rejection] = deque(maxlen=rejections_kept_max)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.listener: Callable[[Rejection], None] | None = None

    def record(self, rejection: Rejection) -> None:
        with self._lock:
            self._recent.append(rejection)
            self.counts[(rejection.kind, rejection.reason)] += 1
        if rejection.reason == "internal":
            log.error("entry %d (%s) rejected by apply: %s", rejection.offset, rejection.kind,
                      rejection.error)
        if self.listener is not None:
            self.listener(rejection)

    def recent(self, limit: int = rejections_kept_max) -> list[dict]:
        with self._lock:
            items = list(self._recent)[-limit:]
        return [asdict(r) for r in reversed(items)]
