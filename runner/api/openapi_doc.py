"""The console's OpenAPI document: the operations the console calls, with every schema they
reference. ``console/openapi.json`` is this document, committed; the console's typed client
is generated from it (openapi-typescript) and a test fails when it is stale.

Rewrite it with ``python -m runner.api.openapi_doc`` after changing an operation listed here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CONSOLE_PREFIXES = ("/v1/auth/", "/v1/workflows", "/v1/review/", "/v1/runs", "/v1/metrics",
                    "/v1/console/")
DOCUMENT = Path(__file__).resolve().parents[2] / "console" / "openapi.json"


def _refs(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.add(ref.rsplit("/", 1)[1])
        for v in value.values():
            _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


def console_document(full: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``full`` (an OpenAPI document) the console uses."""
    paths = {p: ops for p, ops in full["paths"].items() if p.startswith(CONSOLE_PREFIXES)}
    schemas = full.get("components", {}).get("schemas", {})
    wanted: set[str] = set()
    _refs(paths, wanted)
    todo = list(wanted)
    while todo:  # schemas referencing schemas
        found: set[str] = set()
        _refs(schemas.get(todo.pop(), {}), found)
        for name in found - wanted:
            wanted.add(name)
            todo.append(name)
    components = dict(full.get("components", {}))
    components["schemas"] = {k: schemas[k] for k in sorted(wanted) if k in schemas}
    return {"openapi": full["openapi"], "info": {"title": "Railflow console API",
                                                  "version": full["info"]["version"]},
            "paths": dict(sorted(paths.items())), "components": components}


def render() -> str:
    import tempfile

    from runner.api.app import create_app
    from runner.settings import Settings

    with tempfile.TemporaryDirectory() as data:
        app = create_app(settings=Settings(data_dir=Path(data)), manage=False)
        return json.dumps(console_document(app.openapi()), indent=1, sort_keys=False) + "\n"


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if DOCUMENT.exists() and DOCUMENT.read_text() == text else 1)
    DOCUMENT.write_text(text)
    print(f"wrote {DOCUMENT}")
