"""Entity tags of drafts: a hash of the canonical JSON, compared in apply (deterministic) so
that of two saves made from the same read, the second answers 409."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def draft_etag(definition: dict[str, Any]) -> str:
    digest = hashlib.sha256(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f'"{digest[:20]}"'
