"""Forwards a follower's submissions to the leader over HTTP (``POST /internal/v1/submit``).

Requests are signed with the cluster secret (not the apps' secret), carry a random nonce and
name the leadership term they are meant for (the leader's writer id). The leader accepts a
request only if its signature is at most ``forward_age_ms_max`` old, its term is the one this
leader writes with, its nonce was not seen within that window (``ReplayGuard``) and its kind is
one a follower's API may submit (``FORWARDABLE_KINDS``: never ``Tick``/``EffectsDone``, which
only a leader writes, nor replog's own kinds). The seen-set lives on one leader only; the term
is what makes a request captured on its way to one leader worthless to the next (a new leader,
or the same node restarted, always writes with a larger writer id). A follower that named the
wrong term gets 409 with the leader's term and signs again for it (``HttpForwarder`` learns
each leader's term that way, starting from its own log's newest writer id). The leader answers
with the ``Applied`` of the entry, effects included (only ``Reply`` and ``RunChanged`` travel;
the rest are the leader's business).
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from replog.errors import AppendTimeout, Fenced, NotLeader, Overloaded, ReplogError
from replog.protocols import Applied
from runner import signing
from runner.state import entries
from runner.state.effects import Reply, RunChanged
from runner.state.views import presented

PATH = "/internal/v1/submit"
FORWARDABLE_KINDS = frozenset(entries.KINDS - {entries.TICK, entries.EFFECTS_DONE})
forward_age_ms_max = 30_000
nonces_max = 200_000  # ~ 30 s of forwards at 6,000/s; beyond that the oldest are forgotten
_WIRE_EFFECTS = {"Reply": Reply, "RunChanged": RunChanged}
_ERRORS = {"NotLeader": NotLeader, "Fenced": Fenced, "AppendTimeout": AppendTimeout,
           "Overloaded": Overloaded}


def encode_applied(applied: Applied) -> bytes:
    """The runs an effect carries travel presented (``views.presented``: the API's view, its
    path as dicts), as the follower answers them."""
    effects = []
    for e in applied.effects:
        if isinstance(e, Reply):
            effects.append({"type": "Reply", "ok": e.ok,
                            "runs": [presented(r) for r in e.runs], "error": e.error,
                            "field": e.field, "result": e.result})
        elif isinstance(e, RunChanged):
            effects.append({"type": "RunChanged", "run": presented(e.run)})
    return orjson.dumps({"offset": applied.offset, "writer_id": applied.writer_id,
                         "effects": effects})


def decode_applied(raw: bytes) -> Applied:
    body = orjson.loads(raw)
    effects: list[Any] = []
    for e in body["effects"]:
        cls = _WIRE_EFFECTS[e.pop("type")]
        effects.append(cls(**e))
    return Applied(body["offset"], body["writer_id"], effects)


class WrongTerm(Exception):
    """A forward signed for another leadership term than this leader's ``term``."""

    def __init__(self, term: int) -> None:
        super().__init__(f"signed for another leader; this leader writes as {term}")
        self.term = term


def encode_request(kind: str, payload: bytes, timeout_s: float, term: int) -> bytes:
    """The body of a forward meant for the leader that writes with writer id ``term``."""
    return orjson.dumps({"kind": kind, "payload": base64.b64encode(payload).decode(),
                         "timeout_s": timeout_s, "nonce": secrets.token_hex(16), "term": term})


def decode_request(raw: bytes) -> tuple[str, bytes, float, str, int]:
    """(kind, payload, timeout_s, nonce, term); raises ValueError when malformed."""
    try:
        body = orjson.loads(raw)
        kind, nonce, term = body["kind"], body["nonce"], body["term"]
        if not isinstance(kind, str) or not isinstance(nonce, str) or not nonce:
            raise ValueError("kind and nonce must be strings")
        if not isinstance(term, int) or isinstance(term, bool):
            raise ValueError("term must be an integer")
        return kind, base64.b64decode(body["payload"], validate=True), float(body["timeout_s"]), \
            nonce, term
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"malformed forwarded request: {exc}") from None


class ReplayGuard:
    """Nonces seen within the signature window: a captured request sent again is refused."""

    def __init__(self, window_ms: int = forward_age_ms_max, size_max: int = nonces_max) -> None:
        self._window_ms, self._size_max = window_ms, size_max
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, nonce: str, now_ms: int) -> bool:
        with self._lock:
            while self._seen:
                oldest, at = next(iter(self._seen.items()))
                if at > now_ms - self._window_ms and len(self._seen) < self._size_max:
                    break
                del self._seen[oldest]
            if nonce in self._seen:
                return False
            self._seen[nonce] = now_ms
            return True


def check_forwarded(secret: str, guard: ReplayGuard, body: bytes, header: str | None,
                    now_ms: int, leader_term: int | None) -> tuple[str, bytes, float]:
    """The request a follower forwarded, once authentic, fresh, for this leader's term
    (``leader_term``: its writer id, None when it does not lead), new and of an allowed kind;
    raises PermissionError (401), ValueError (400), NotLeader or WrongTerm with the reason.
    The nonce is remembered only once everything else passed."""
    if not signing.verify(secret, body, header, now_ms, forward_age_ms_max):
        raise PermissionError("missing, stale or wrong cluster signature")
    kind, payload, timeout_s, nonce, term = decode_request(body)
    if kind not in FORWARDABLE_KINDS:
        raise ValueError(f"kind {kind!r} cannot be forwarded")
    if leader_term is None:
        raise NotLeader("not the leader")
    if term != leader_term:
        raise WrongTerm(leader_term)
    if not guard.first_time(nonce, now_ms):
        raise PermissionError("replayed request")
    return kind, payload, timeout_s


def error_body(exc: ReplogError) -> bytes:
    return orjson.dumps({"error": type(exc).__name__, "message": str(exc),
                         "leader_url": getattr(exc, "leader_url", None)})


def wrong_term_body(exc: WrongTerm) -> bytes:
    return orjson.dumps({"error": "WrongTerm", "message": str(exc), "term": exc.term})


class HttpForwarder:
    """Forwards to the leader's URL, signed for the term it learnt that leader writes with
    (first guess: ``term_hint()``, the newest writer id this node's log holds)."""

    def __init__(self, secret: str, connections_max: int = 64, *,
                 term_hint: Callable[[], int] | None = None,
                 client: httpx.Client | None = None) -> None:
        self._secret = secret
        self.term_hint = term_hint
        self._terms: dict[str, int] = {}  # leader URL -> the term it last asked for
        self._client = client or httpx.Client(
            limits=httpx.Limits(max_connections=connections_max,
                                max_keepalive_connections=connections_max))

    def _term_for(self, leader_url: str) -> int:
        term = self._terms.get(leader_url)
        if term is None:
            term = self.term_hint() if self.term_hint is not None else -1
        return term

    def forward(self, leader_url: str, kind: str, payload: bytes, timeout_s: float) -> Applied:
        resp = self._post(leader_url, kind, payload, timeout_s, self._term_for(leader_url))
        if resp.status_code == 409:  # another term than we guessed: sign again for the leader's
            term = _term_of(resp)
            if term is not None:
                self._terms[leader_url] = term
                resp = self._post(leader_url, kind, payload, timeout_s, term)
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

    def _post(self, leader_url: str, kind: str, payload: bytes, timeout_s: float,
              term: int) -> httpx.Response:
        body = encode_request(kind, payload, timeout_s, term)
        headers = {"content-type": "application/json",
                   signing.HEADER: signing.sign(self._secret, body, int(time.time() * 1000))}
        try:
            return self._client.post(leader_url + PATH, content=body, headers=headers,
                                     timeout=timeout_s + 1)
        except httpx.TimeoutException as exc:
            raise AppendTimeout(f"leader {leader_url} did not answer: {exc}") from exc
        except httpx.HTTPError as exc:
            raise NotLeader(f"leader {leader_url} unreachable: {exc}") from exc

    def close(self) -> None:
        self._client.close()


def _term_of(resp: httpx.Response) -> int | None:
    try:
        body = resp.json()
    except ValueError:
        return None
    term = body.get("term") if isinstance(body, dict) and body.get("error") == "WrongTerm" \
        else None
    return term if isinstance(term, int) and not isinstance(term, bool) else None
