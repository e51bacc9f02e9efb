"""A Sift-compatible door onto Railflow: Sift's Events, Workflow Status and Decisions APIs.

A merchant integrated with Sift's client libraries points them at a Railflow node and keeps
its code. Every request is translated into the operations ``/v1/events`` and the review queue
use (``runner.operations``): the same log entries, the same dedup, the same runs. This package
only translates and presents; it holds no state of its own.

- ``config``: which Sift event types and abuse types map to which Railflow types and workflows
  (``RAILFLOW_SIFT_*`` variables, see docs/sift.md);
- ``codes``: Sift's status codes and the ``SiftError`` every route turns into Sift's JSON;
- ``translate``: a Sift event body into a Railflow event (pure);
- ``present``: Railflow runs as Sift workflow statuses, scores and decisions (pure);
- ``ratelimit``: the optional per-key request budget (status 60);
- ``calls``: what each Sift endpoint does, over a ``Service``.

The HTTP routes live in ``runner.api.sift``; callers install them with ``install(app)``.
"""
