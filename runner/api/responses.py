"""A JSON response serialized with orjson (the hot path skips response-model validation)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Response


def json_response(value: Any, status_code: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(value), status_code=status_code, media_type="application/json",
                    headers=headers)
