"""HMAC-SHA256 signatures for webhooks we send and app callbacks we receive.

Header ``Railflow-Signature: t=<epoch ms>,v1=<hex hmac of "<t>.<body>">``. Receivers recompute
the HMAC with the shared secret, compare in constant time and reject stale timestamps. An app's
callback signs ``callback_message(run_id, node_id, body)`` with its own app secret.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Railflow-Signature"
signature_age_ms_max = 5 * 60 * 1000


def sign(secret: str, body: bytes, ts_ms: int) -> str:
    mac = hmac.new(secret.encode(), f"{ts_ms}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts_ms},v1={mac}"


def signed_at(header: str | None) -> tuple[int, str] | None:
    """(t, v1) of a signature header, or None when it is malformed."""
    if not header:
        return None
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        return int(parts["t"]), parts["v1"]
    except (KeyError, ValueError):
        return None


def verify(secret: str, body: bytes, header: str | None, now_ms: int,
           age_ms_max: int = signature_age_ms_max) -> bool:
    """True when ``header`` is a valid signature of ``body`` made within ``age_ms_max``."""
    parsed = signed_at(header)
    if parsed is None:
        return False
    ts_ms, given = parsed
    if abs(now_ms - ts_ms) > age_ms_max:
        return False
    return hmac.compare_digest(sign(secret, body, ts_ms).split("v1=", 1)[1], given)


def callback_message(run_id: str, node_id: str, body: bytes) -> bytes:
    """What an app signs to answer one node of one run: a signature for another run or node,
    or for a review node, does not verify."""
    return f"{run_id}/{node_id}\n".encode() + body


def internal_message(method: str, path: str, body: bytes) -> bytes:
    """What a node (or an operator's tool) signs with the cluster secret to call
    ``/internal/*``: the route is part of it, so a signature is good for one route only."""
    return f"{method.upper()} {path}\n".encode() + body


def internal_headers(secret: str, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    return {HEADER: sign(secret, internal_message(method, path, body), int(time.time() * 1000))}
