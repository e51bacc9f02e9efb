"""The hot path: ``POST /v1/events`` and an app's callback as plain ASGI, ahead of FastAPI.

An order costs the server a few hundred microseconds of CPU at most; FastAPI's dependency
solving, threadpool hops and pydantic models cost more than that. ``HotPath`` is an ASGI
middleware that serves the two routes itself in the common case: the bearer is resolved by
``AuthStore.principal`` (a cached constant-time lookup), the body is decoded once by msgspec
into the structs below, the entry payload is encoded once, the reply is encoded once, all on
the event loop. Whatever it does not serve itself (no or unknown credentials, a user token,
a body the structs refuse, odd query parameters) goes on to the FastAPI route of the same path,
which stays the reference: the OpenAPI document and every 4xx message come from it, so both
paths answer alike.

It also bounds every request body before the application sees it: a Content-Length above
``limits.body_bytes_max(path)`` is refused at once, and a streamed body is counted as it
arrives (413 naming ``body``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import parse_qsl

import msgspec
import orjson

from runner import limits, signing
from runner import operations as ops
from runner.api import errors
from runner.errors import RequestInvalid
from runner.service import Service, _settled
from runner.state import entries

log = logging.getLogger(__name__)

EVENTS_PATH = "/v1/events"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
deadline_ms_max = 30_000  # as the route's ``deadline_ms`` query parameter
_JSON_HEADERS = [(b"content-type", b"application/json")]
# An answer without ASGI: (status, headers, body), headers content-type and -length included.
Answer = Callable[[int, list[tuple[bytes, bytes]], bytes], None]
_EVENT_BODY_MAX = limits.body_bytes_max(EVENTS_PATH)
INTERNAL_ERROR = (500, [(b"content-type", b"text/plain; charset=utf-8"),
                         (b"content-length", b"21")], b"Internal Server Error")


class EventStruct(msgspec.Struct, forbid_unknown_fields=True):
    """``models.EventIn`` as a msgspec struct, at least as strict (``\\Z``: Python's ``$``
    would let a trailing newline through)."""

    event_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200,
                                          pattern=r"^[^\x00-\x1f/]+\Z")]
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=64,
                                      pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z")]
    ts: Annotated[int, msgspec.Meta(ge=0, le=2**62)] | None = None
    data: Annotated[dict[str, Any], msgspec.Meta(max_length=200)] = msgspec.field(
        default_factory=dict)


class AppResultStruct(msgspec.Struct, forbid_unknown_fields=True):
    """``models.AppResultIn`` as a msgspec struct."""

    result: Annotated[dict[str, Any], msgspec.Meta(max_length=200)]


_event_decoder = msgspec.json.Decoder(EventStruct)
_app_result_decoder = msgspec.json.Decoder(AppResultStruct)
_NOT_DECODED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


class HotPath:
    """ASGI middleware over an application (``create_app`` puts it in front of FastAPI's
    whole stack). With ``serve=False`` it only bounds bodies and leaves every route to it;
    ``lean`` lets ``runner.api.transport`` serve orders through ``serve_order_now``."""

    def __init__(self, app: Any, service: Service, serve: bool = True,
                 lean: bool = False) -> None:
        self.app = app
        self.svc = service
        self.serve = serve
        self.lean = lean  # runner.api.transport may call serve_order_now

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        cap = limits.body_bytes_max(path)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            await _too_large(scope, receive, send, cap)
            return
        body = await _read_body(receive, cap)
        if body is None:
            await _too_large(scope, receive, send, cap)
            return
        if self.serve and scope["method"] == "POST":
            if path == EVENTS_PATH and await self._event(scope, body, receive, send):
                return
            if path.startswith("/v1/runs/") and await self._app_result(scope, body, receive,
                                                                        send):
                return
        await self.app(scope, _replay(body, receive), send)

    async def _event(self, scope: dict, body: bytes, receive: Any, send: Any) -> bool:
        """Serve ``POST /v1/events``; False leaves the request to the FastAPI route."""
        if not _json_body(scope) or not self._client(scope):
            return False
        deadline_ms = _deadline_ms(scope["query_string"])
        if deadline_ms == -1:
            return False
        decoded = _event_of(body)
        if decoded is None:
            return False
        event, payload = decoded
        try:
            result = await ops.receive_event(self.svc, event, deadline_ms or None, payload)
        except errors.HANDLED as exc:
            await errors.render(exc)(scope, receive, send)
            return True
        await _send_json(send, orjson.dumps(result))
        return True

    async def _app_result(self, scope: dict, body: bytes, receive: Any, send: Any) -> bool:
        """Serve ``POST /v1/runs/{run_id}/apps/{node_id}``; False leaves it to the route."""
        parts = scope["path"].split("/")
        if len(parts) != 6 or parts[4] != "apps" or not parts[3] or not parts[5]:
            return False
        secret = ops.app_secret(self.svc, parts[3], parts[5])  # the app's own, per node
        if not _json_body(scope) or not signing.verify(
                secret, signing.callback_message(parts[3], parts[5], body),
                _header(scope, b"railflow-signature"), now_ms=ops._now_ms()):
            return False
        try:
            parsed = _app_result_decoder.decode(body)
        except _NOT_DECODED:
            return False
        try:
            raw = orjson.dumps({"run_id": parts[3], "node_id": parts[5],
                                "result": parsed.result})
        except TypeError:
            return False  # the route's validator words the error
        try:
            run = await ops.app_completed(self.svc, parts[3], parts[5], parsed.result, raw)
        except errors.HANDLED as exc:
            await errors.render(exc)(scope, receive, send)
            return True
        await _send_json(send, orjson.dumps(run))
        return True

    def serve_order_now(self, scope: dict, body: bytes, answer: Answer) -> bool:
        """Serve a whole ``POST /v1/events`` request (body read) without ASGI: no task, no
        receive or send; ``answer`` gets the reply on this loop once the order applied (a
        run still waiting on an app: through a task that waits as the route does). False, at
        once, for anything the ASGI path must judge (``runner.api.transport`` then runs it)."""
        return self.serve_order(scope["query_string"], _header(scope, b"authorization"),
                                _header(scope, b"content-type"), body, answer)

    def serve_order(self, query: bytes | None, authorization: str | None, content_type: str | None,
                    body: bytes, answer: Answer,
                    waits: asyncio.AbstractEventLoop | None = None) -> bool:
        """``serve_order_now`` from the parts of the request it reads (the raw query, or
        None; header values as Latin-1 text). A valid ``deadline_ms`` in the query bounds the
        wait for runs as on the route; any other value of it is the route's to judge. Without
        ``waits`` it runs on an event loop and answers there; with it (``runner.api.native``,
        from a plain thread) the node's thread that applied the order calls ``answer``
        itself, and a run still waiting on an app is waited for on ``waits``."""
        deadline_ms = _deadline_ms(query) if query else 0
        if not self.serve or deadline_ms == -1 or len(body) > _EVENT_BODY_MAX or not _json_type(
                content_type) or not self._client_key(authorization):
            return False
        decoded = _event_of(body)
        if decoded is None:
            return False
        event, payload = decoded
        try:
            order = ops.event_order(self.svc, event, deadline_ms or None, payload)
            self.svc.check_entry_size(payload)
        except errors.HANDLED as exc:
            _answer_error(answer, exc)
            return True

        def then(applied: Any, error: Any) -> None:
            self._order_applied(order, applied, error, answer, waits)

        if waits is None:
            self.svc.submit_then(entries.EVENT_RECEIVED, payload, then)
        else:
            self.svc.submit_direct(entries.EVENT_RECEIVED, payload, then)
        return True

    def _order_applied(self, order: ops.EventOrder, applied: Any, error: Any,
                       answer: Answer, waits: asyncio.AbstractEventLoop | None = None) -> None:
        try:
            if error is not None:
                raise error
            reply = ops.reply_checked(self.svc, applied)
        except errors.HANDLED as exc:
            _answer_error(answer, exc)
            return
        except Exception:  # as uvicorn answers an application's failure
            log.exception("order %s failed", order.event["event_id"])
            answer(*INTERNAL_ERROR)
            return
        if all(_settled(v) for v in reply.runs):  # the common case: nothing to wait for
            _answer_body(answer, ops.event_answer_json(self.svc, order, reply, reply.runs))
        elif waits is None:
            asyncio.ensure_future(self._order_waits(order, reply, answer))
        else:  # called on the node's thread: the run waits on the given loop
            asyncio.run_coroutine_threadsafe(self._order_waits(order, reply, answer), waits)

    async def _order_waits(self, order: ops.EventOrder, reply: Any, answer: Answer) -> None:
        try:
            views = await self.svc.wait_runs(reply.runs, order.deadline_at)
            _answer_body(answer, ops.event_answer_json(self.svc, order, reply, views))
        except Exception:
            log.exception("order %s failed", order.event["event_id"])
            answer(*INTERNAL_ERROR)

    def _client(self, scope: dict) -> bool:
        return self._client_key(_header(scope, b"authorization"))

    def _client_key(self, value: str | None) -> bool:
        """True for a known client key (users' tokens go the FastAPI way: roles)."""
        if value is None:
            return False
        scheme, _, credentials = value.partition(" ")
        if scheme.lower() != "bearer" or not credentials:
            return False
        principal = self.svc.auth.principal(credentials)
        return principal is not None and principal.kind == "client"


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _event_of(body: bytes) -> tuple[dict, bytes] | None:
    """An order's body as the event dict and the entry payload; None for anything the route's
    validator must word (a schema error, integers beyond 64 bits, lone surrogates: orjson, as
    the route, fails on those)."""
    try:
        ev = _event_decoder.decode(body)
    except _NOT_DECODED:
        return None
    event = {"event_id": ev.event_id, "type": ev.type, "ts": ev.ts, "data": ev.data}
    try:
        return event, orjson.dumps(event)
    except TypeError:
        return None


def _json_body(scope: dict) -> bool:
    return _json_type(_header(scope, b"content-type"))


def _json_type(value: str | None) -> bool:
    """As FastAPI reads a JSON body: no Content-Type, or application/json."""
    return value is None or value.split(";", 1)[0].strip().lower() == "application/json"


def _deadline_ms(query: bytes) -> int:
    """``deadline_ms`` when valid, 0 when absent, -1 for anything the route must judge."""
    if not query:
        return 0
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    values = [v for k, v in pairs if k == "deadline_ms"]
    if not values:
        return 0
    if len(values) > 1 or not values[0].isascii() or not values[0].isdigit():
        return -1
    value = int(values[0])
    return value if 1 <= value <= deadline_ms_max else -1


async def _read_body(receive: Any, cap: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``cap`` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away; the app sees a short body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _too_large(scope: dict, receive: Any, send: Any, cap: int) -> None:
    await errors.render(_too_large_error(cap))(scope, receive, send)


def _too_large_error(cap: int) -> RequestInvalid:
    return RequestInvalid("", f"request body larger than {cap} bytes", 413)


def too_large_answer(path: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The answer to a body over ``limits.body_bytes_max(path)`` (``runner.api.native``'s
    front gives it without asking Python)."""
    response = errors.render(_too_large_error(limits.body_bytes_max(path)))
    return response.status_code, response.raw_headers, bytes(response.body)


async def _send_json(send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _answer_body(answer: Answer, body: bytes) -> None:
    answer(200, [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())], body)


def _answer_error(answer: Answer, exc: Exception) -> None:
    response = errors.render(exc)
    answer(response.status_code, response.raw_headers, bytes(response.body))
