"""HMAC-SHA256 signatures for webhooks we send and app callbacks we receive.

Header ``Railflow-Signature: t=<epoch ms>,v1=<hex hmac of "<t>.<body>">``. Receivers recompute
the HMAC with the shared secret, compare in constant time and reject stale timestamps.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "Railflow-Signature"
signature_age_ms_max = 5 * 60 * 1000


def sign(secret: str, body: bytes, ts_ms: int) -> str:
    mac = hmac.new(secret.encode(), f"{ts_ms}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts_ms},v1={mac}"


def verify(secret: str, body: bytes, header: str | None, now_ms: int) -> bool:
    """True when ``header`` is a valid, fresh signature of ``body``."""
    if not header:
        return False
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        ts_ms = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return False
    if abs(now_ms - ts_ms) > signature_age_ms_max:
        return False
    return hmac.compare_digest(sign(secret, body, ts_ms).split("v1=", 1)[1], given)
