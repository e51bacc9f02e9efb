"""uvicorn's httptools protocol with each answer's head and body in one ``write``.

uvicorn writes an answer's head (``http.response.start``) and its body apart: two ``send``
syscalls and two TCP segments per order, about a tenth of the HTTP thread's CPU. Here the
connection's transport holds a write back until the next one or, at the latest, the end of the
event loop's current iteration (``call_soon``), so a head and the body sent right after it
leave together, and a head alone (a HEAD request, a streamed body that takes its time) leaves
one iteration later. Pass ``HttpToolsProtocol`` as uvicorn's ``http``.

It also serves an order (``POST /v1/events``) without ASGI when it can: uvicorn's per-request
task, its ``receive``/``send`` coroutines and the application's chain of calls were a fifth of
the HTTP thread per order. Once an order's headers are in, the protocol completes the scope
uvicorn began and holds the request in a bare cycle (``_HeldCycle``) that uvicorn's callbacks
fill with the body; then ``HotPath.serve_order_now`` takes the request (its checks, decode,
submit) and its answer is written straight to the connection, or declines it and the request
runs as uvicorn would have run it, in a ``RequestResponseCycle`` and a task (the FastAPI route
answers, the reference for every refusal). Only a request that fits is held: keep-alive
HTTP/1.1, the exact path without a query, a Content-Length body within the hot path's bound
and uvicorn's read buffer, no request in flight before it on the connection, no access log and
no concurrency limit; requests pipelined behind a held one wait their turn as behind any other.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base

from runner import limits
from runner.api.hot import EVENTS_PATH, INTERNAL_ERROR

log = logging.getLogger(__name__)

_EVENTS_URL = EVENTS_PATH.encode()
# A held order's body stays in uvicorn's buffer, which stops reading past HIGH_WATER_LIMIT.
held_body_bytes_max = min(limits.body_bytes_max(EVENTS_PATH), HIGH_WATER_LIMIT)


class _NoEvent:
    def set(self) -> None:
        pass


class _HeldCycle:
    """A held order's cycle: what uvicorn's protocol reads and writes of its current cycle
    (body, end of body, disconnection, keep-alive at shutdown), nothing else until it is
    answered or handed to ASGI as a real ``RequestResponseCycle``."""

    __slots__ = ("scope", "body", "more_body", "response_complete", "keep_alive",
                 "disconnected", "message_event")

    def __init__(self, scope: dict) -> None:
        self.scope = scope
        self.body = bytearray()
        self.more_body = True
        self.response_complete = False
        self.keep_alive = True
        self.disconnected = False
        self.message_event = _NO_EVENT


_NO_EVENT = _NoEvent()


class HeldWriteTransport:
    """A transport whose every other write waits for the one after it (see the module).
    Closing or ending the stream writes what is held first; the rest is the wrapped one's."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            self._transport.write(held + data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpToolsProtocol(_Base):
    """uvicorn's ``HttpToolsProtocol`` writing through a ``HeldWriteTransport``, serving orders
    without ASGI when it can (see the module)."""

    _held: _HeldCycle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeldWriteTransport(transport, self.loop))  # type: ignore[arg-type]
        hot = getattr(self.app, "hot", None)
        self._hot = hot if hot is not None and hot.lean else None

    def on_headers_complete(self) -> None:
        if self._hot is None or not self._order_fits():
            super().on_headers_complete()
            return
        # What uvicorn's on_headers_complete adds to the scope on_message_begin started, for
        # this one method, path and version; the cycle waits for the body (uvicorn's on_body
        # and on_message_complete fill it as they fill any cycle).
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = self.root_path + EVENTS_PATH
        scope["raw_path"] = self.root_path.encode("ascii") + _EVENTS_URL
        scope["query_string"] = b""
        self.cycle = self._held = _HeldCycle(scope)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        held = self._held
        if held is None or held is not self.cycle:
            return
        self._held = None
        if held.disconnected:
            return
        try:
            served = self._hot.serve_order_now(held.scope, bytes(held.body),
                                               lambda *a: self._answer(held, *a))
        except Exception:  # a failure here would reach httptools and answer 400
            log.exception("serving an order failed")
            self._answer(held, *INTERNAL_ERROR)
            return
        if not served:
            self._to_asgi(held)

    def _to_asgi(self, held: _HeldCycle) -> None:
        """Run a held request as uvicorn would have from its headers on (its body is in)."""
        cycle = RequestResponseCycle(
            scope=held.scope, transport=self.transport, flow=self.flow, logger=self.logger,
            access_logger=self.access_logger, access_log=self.access_log,
            default_headers=self.server_state.default_headers, message_event=asyncio.Event(),
            expect_100_continue=False, keep_alive=held.keep_alive,
            on_response=self.on_response_complete)
        cycle.body, cycle.more_body = held.body, False
        cycle.message_event.set()  # the body is in: receive() must not wait for it
        self.cycle = cycle
        self._start_asgi_task(cycle, self.app)

    def _order_fits(self) -> bool:
        """Whether the request whose headers just came may be held (see the module)."""
        parser = self.parser
        if self.limit_concurrency is not None or self.access_log:  # uvicorn's own 503, its log
            return False
        if (self.url != _EVENTS_URL or parser.get_method() != b"POST" or self.pipeline
                or (self.cycle is not None and not self.cycle.response_complete)
                or self.expect_100_continue or parser.should_upgrade()
                or parser.get_http_version() != "1.1" or not parser.should_keep_alive()):
            return False
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                if length is not None:
                    return False
                length = value
            elif name == b"transfer-encoding":
                return False
        return length is not None and length.isdigit() and int(length) <= held_body_bytes_max

    def _answer(self, cycle: Any, status: int, headers: list[tuple[bytes, bytes]],
                body: bytes) -> None:
        """Write a held request's answer in one write and finish its cycle as uvicorn does."""
        if cycle.response_complete:
            return
        cycle.response_complete = True
        transport = self.transport
        if not cycle.disconnected and not transport.is_closing():
            parts = [STATUS_LINE[status]]
            for name, value in (*self.server_state.default_headers, *headers):
                parts += [name, b": ", value, b"\r\n"]
            if not cycle.keep_alive:  # the server is shutting down
                parts.append(b"connection: close\r\n")
            parts += [b"\r\n", body]
            if isinstance(transport, HeldWriteTransport):
                transport.flush()  # whatever it holds goes first (no answer waits behind it)
                transport._transport.write(b"".join(parts))
            else:
                transport.write(b"".join(parts))
            if not cycle.keep_alive:
                transport.close()
        cycle.message_event.set()
        self.on_response_complete()
