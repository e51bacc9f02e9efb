"""Errors raised by infra/. Callers print them; they carry the log file to look at."""


class InfraError(RuntimeError):
    """A server could not be fetched, started, probed or stopped."""
