"""Forwards a follower's submissions to the leader over HTTP (``POST /internal/v1/submit``).

Requests are signed with the cluster's shared secret; the leader answers with the ``Applied``
of the entry, effects included (only ``Reply`` and ``RunChanged`` travel; the rest are the
leader's business).
"""

from __future__ import annotations

import base64
import time
from dataclasses import asdict
from typing import Any

import httpx
import orjson

from replog.errors import AppendTimeout, Fenced, NotLeader, Overloaded, ReplogError
from replog.protocols import Applied
from runner import signing
from runner.state.effects import Reply, RunChanged

PATH = "/internal/v1/submit"
_WIRE_EFFECTS = {"Reply": Reply, "RunChanged": RunChanged}
_ERRORS = {"NotLeader": NotLeader, "Fenced": Fenced, "AppendTimeout": AppendTimeout,
           "Overloaded": Overloaded}


def encode_applied(applied: Applied) -> bytes:
    effects = [{"type": type(e).__name__, **asdict(e)} for e in applied.effects
               if type(e).__name__ in _WIRE_EFFECTS]
    return orjson.dumps({"offset": applied.offset, "writer_id": applied.writer_id,
                         "effects": effects})


def decode_applied(raw: bytes) -> Applied:
    body = orjson.loads(raw)
    effects: list[Any] = []
    for e in body["effects"]:
        cls = _WIRE_EFFECTS[e.pop("type")]
        effects.append(cls(**e))
    return Applied(body["offset"], body["writer_id"], effects)


def encode_request(kind: str, payload: bytes, timeout_s: float) -> bytes:
    return orjson.dumps({"kind": kind, "payload": base64.b64encode(payload).decode(),
                         "timeout_s": timeout_s})


def decode_request(raw: bytes) -> tuple[str, bytes, float]:
    body = orjson.loads(raw)
    return body["kind"], base64.b64decode(body["payload"]), float(body["timeout_s"])


def error_body(exc: ReplogError) -> bytes:
    return orjson.dumps({"error": type(exc).__name__, "message": str(exc),
                         "leader_url": getattr(exc, "leader_url", None)})


class HttpForwarder:
    def __init__(self, secret: str, connections_max: int = 64) -> None:
        self._secret = secret
        self._client = httpx.Client(limits=httpx.Limits(max_connections=connections_max,
                                                        max_keepalive_connections=connections_max))

    def forward(self, leader_url: str, kind: str, payload: bytes, timeout_s: float) -> Applied:
        body = encode_request(kind, payload, timeout_s)
        headers = {"content-type": "application/json",
                   signing.HEADER: signing.sign(self._secret, body, int(time.time() * 1000))}
        try:
            resp = self._client.post(leader_url + PATH, content=body, headers=headers,
                                     timeout=timeout_s + 1)
        except httpx.TimeoutException as exc:
            raise AppendTimeout(f"leader {leader_url} did not answer: {exc}") from exc
        except httpx.HTTPError as exc:
            raise NotLeader(f"leader {leader_url} unreachable: {exc}") from exc
        if resp.status_code == 200:
            return decode_applied(resp.content)
        try:
            err = resp.json()
            cls = _ERRORS.get(err.get("error"), NotLeader)
        except ValueError:
            raise NotLeader(f"leader answered {resp.status_code}") from None
        if cls is NotLeader:
            raise NotLeader(err.get("message", ""), err.get("leader_url"))
        raise cls(err.get("message", ""))

    def close(self) -> None:
        self._client.close()
