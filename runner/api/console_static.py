"""Serves the built console (``console/dist``) at ``/console``; client routes get index.html.

The bundle is built by ``make console`` (npm ci + vite build). Without it, ``/console`` answers
503 with the command to build it, and the API is served as usual.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse

import console

DIST = Path(console.__file__).resolve().parent / "dist"
NOT_BUILT = "the console is not built: run `make console` (needs Node 20 and npm)\n"


def install(app: FastAPI, dist: Path = DIST) -> None:
    root = dist.resolve()

    @app.get("/console", include_in_schema=False)
    def console_root():
        return RedirectResponse("/console/")

    @app.get("/console/{path:path}", include_in_schema=False)
    def console_file(path: str):
        index = root / "index.html"
        if not index.is_file():
            return PlainTextResponse(NOT_BUILT, status_code=503)
        target = (root / path).resolve()
        if path and target.is_file() and target.is_relative_to(root):
            # Hashed asset names never change content: cache them; index.html is revalidated.
            immutable = target.parent.name == "assets"
            headers = {"Cache-Control": "public, max-age=31536000, immutable" if immutable
                       else "no-cache"}
            return FileResponse(target, headers=headers)
        if path.startswith("assets/"):
            raise HTTPException(404, f"no console asset {path}")
        return FileResponse(index, headers={"Cache-Control": "no-cache"})
