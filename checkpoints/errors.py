"""Errors raised by the checkpoints package.

``CorruptCheckpoint`` means one checkpoint cannot be used (missing or damaged manifest or part);
callers skip it and fall back to an older one. ``InvariantViolation`` means a bug: it stays on
under ``python -O`` and must never be caught to carry on.
"""


class InvariantViolation(RuntimeError):
    """A pre- or post-condition that must always hold did not."""


class CorruptCheckpoint(Exception):
    """A checkpoint folder is partial or damaged; the reason says which part and why."""


class CheckpointStoreError(Exception):
    """A store answered with an error other than "not found" (HTTP status, S3 error code)."""
