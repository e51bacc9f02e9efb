"""Builds the FastAPI application."""

from fastapi import FastAPI

from runner import __doc__ as runner_doc


def create_app() -> FastAPI:
    """Return the Railflow HTTP application (OpenAPI at ``/docs``)."""
    app = FastAPI(title="Railflow", version="0.1.0", description=runner_doc or "")

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
