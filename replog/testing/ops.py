"""The operations of the reference machines: JSON payloads ``{"op": "put"|"incr"|"del", ...}``.

Both ``DuckKV`` and ``DictKV`` apply them with the same results, so their digests agree.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

KIND = "kv"


def put(key: str, value: int) -> bytes:
    return json.dumps({"op": "put", "key": key, "value": value}).encode()


def incr(key: str, by: int = 1) -> bytes:
    return json.dumps({"op": "incr", "key": key, "by": by}).encode()


def delete(key: str) -> bytes:
    return json.dumps({"op": "del", "key": key}).encode()


def decode(payload: bytes) -> dict[str, Any]:
    return json.loads(payload)


def digest_of(rows: list[tuple[str, int]]) -> str:
    """The digest of a key → value table given sorted rows."""
    text = "".join(f"{key}\x00{value}\n" for key, value in rows)
    return hashlib.sha256(text.encode()).hexdigest()
