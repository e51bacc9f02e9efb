"""Builds the FastAPI application around one started ``Service``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from runner import __doc__ as runner_doc
from runner.api import console_static, errors, sift
from runner.api.hot import BODY_METHODS, HotPath
from runner.api.routes import console, console_runs, events, metrics, ops, review, workflows
from runner.service import Service
from runner.settings import Settings

NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False,
                                 "operation_spans": False, "auto_configure": False}


class RailflowAPI(FastAPI):
    """FastAPI with the hot path in front of its whole middleware stack: a request with a body
    goes to ``HotPath`` first, which serves it or hands it on to FastAPI's own ``__call__``
    (as a middleware, an order first passed FastAPI's call and Starlette's error, telemetry
    and body-limit layers: a coroutine each, for nothing the hot path needs)."""

    hot: HotPath | None = None

    async def __call__(self, scope, receive, send) -> None:
        if self.hot is not None and scope["type"] == "http" and scope["method"] in BODY_METHODS:
            await self.hot(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def _stack(self, scope, receive, send) -> None:
        await super().__call__(scope, receive, send)


def create_app(service: Service | None = None, settings: Settings | None = None, *,
               manage: bool = True, hot_path: bool = True,
               on_started: Callable[[], None] | None = None) -> FastAPI:
    """Return the Railflow HTTP application (OpenAPI at ``/docs``).

    With no ``service``, one is built from ``settings`` (or the environment). With ``manage``,
    the application starts the service on startup and stops it on shutdown. ``hot_path``
    serves the order and app-callback routes through ``runner.api.hot`` (off: through their
    FastAPI routes alone, the reference the hot path is tested against). ``on_started`` runs
    once the service started (a serving process settles its garbage collector there)."""
    owned = manage
    svc = service or Service(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if owned:
            svc.start()
        if on_started is not None:
            on_started()
        yield
        if owned:
            svc.stop()

    hot_path = hot_path and svc.settings.hot_path
    # No OpenTelemetry here (the node's metrics are Prometheus'): FastAPI's own telemetry,
    # on by default, looked up the global tracer and meter providers on every request.
    app = RailflowAPI(title="Railflow", version="0.1.0", description=runner_doc or "",
                  lifespan=lifespan, telemetry=NO_TELEMETRY)
    app.state.service = svc
    errors.install(app)
    app.include_router(console.router)  # before workflows: /v1/workflows/check is static
    app.include_router(console_runs.router)
    for module in (events, workflows, metrics, review, ops):
        app.include_router(module.router)
    sift.install(app)  # the Sift-compatible door (docs/sift.md)
    console_static.install(app)
    app.hot = HotPath(app._stack, service=svc, serve=hot_path,
                      lean=hot_path and svc.settings.lean_orders)
    return app


def app_from_env() -> FastAPI:
    """The application of a node configured by ``RAILFLOW_*`` variables (a server's factory)."""
    from runner import gcpolicy
    from runner.settings import Settings

    settings = Settings()
    gcpolicy.for_serving(settings.gil_switch_ms, freeze_survivors=settings.gc_freeze_survivors,
                         full_every=settings.gc_full_every_s)
    return create_app(on_started=gcpolicy.settle)
