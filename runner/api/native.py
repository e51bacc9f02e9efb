"""The native HTTP front end: ``railflow serve --http native`` (``RAILFLOW_SERVER=native``).

``railflow_http_native`` (the Rust crate in ``runner/native/``, built by ``make venv``: hyper on
a small tokio runtime of its own threads) listens on the node's address and parses, reads and
writes without the GIL. ``POST /v1/events`` is read whole there, bounded by
``limits.body_bytes_max`` (past it: the 413 ``HotPath`` gives, rendered once at start), and
handed to Python with its query (``deadline_ms``) as ``settings.native_http_handoff`` says:
``direct`` (the default), a call on the runtime's thread that read it; ``batch``, one Python
thread taking them in batches (one wakeup and one GIL acquisition per batch). Either runs
``HotPath.serve_order``, the lean path's own checks, decode and submit; the node's thread that
applied the order builds the answer (``HotPath._order_applied``) and hands status, headers and
body to the request's ``Reply`` (a native call that queues it for the runtime and returns),
with no event loop in between. A run still waiting on an app is waited for on a small event
loop of this module, as the route waits.

Whatever ``serve_order`` declines (no or unknown key, a user's token, a body the structs
refuse, a ``deadline_ms`` out of bounds), and every other route (console, OpenAPI, reviews,
admin, app callbacks, ``/metrics``, forwarding between nodes), is forwarded as it came to the
node's own uvicorn on a Unix socket in a directory only this user can enter, which answers as
it does alone: the 4xx messages naming the field, the OpenAPI document and the console are
that application's. The client's address travels in ``x-forwarded-for``, which the front
always sets itself and that uvicorn trusts from the socket alone. As uvicorn alone does, the
front closes a connection idle for ``settings.http_keep_alive_s`` after an answer and answers
malformed HTTP ``400 Invalid HTTP request received.`` (the crate's ``malformed`` module).

``serve_native(service, settings, log_level)`` blocks until SIGINT/SIGTERM, as ``uvicorn.run``
does: uvicorn starts the service (its lifespan), then the front listens; at shutdown the front
stops listening and answers what it holds before the service stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
import threading
from typing import Any

import uvicorn

from runner import gcpolicy, limits
from runner.api.hot import EVENTS_PATH, INTERNAL_ERROR, HotPath, too_large_answer

log = logging.getLogger(__name__)

batch_max = 256  # hot requests taken per wakeup of the Python thread
close_timeout_s = 5.0  # how long a stopping front waits for the answers it owes
# The front keeps its connections to uvicorn for up to 60 s idle; uvicorn must not drop them
# first (a request sent on a connection closing under it would fail).
upstream_keep_alive_s = 120


def _module() -> Any:
    try:
        import railflow_http_native
    except ImportError as exc:  # pragma: no cover - a venv made before the crate existed
        raise RuntimeError("the native HTTP front end is not built: run `make venv` (it builds "
                           "runner/native with maturin)") from exc
    return railflow_http_native


class NativeFront:
    """The front end of one node: ``start(hot)`` listens on ``host:port`` (0: a free port,
    then ``port`` says which), forwarding to the HTTP server on the Unix socket ``upstream``;
    ``close()`` stops it."""

    def __init__(self, host: str, port: int, upstream: str, threads: int = 1,
                 handoff: str = "batch", keep_alive_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.upstream = upstream
        self.threads = threads
        self.handoff = handoff
        self.keep_alive_s = keep_alive_s
        self._front: Any = None
        self._drainer: threading.Thread | None = None
        self._waits: asyncio.AbstractEventLoop | None = None

    def start(self, hot: HotPath) -> None:
        native = _module()
        status, headers, body = too_large_answer(EVENTS_PATH)
        waits = self._waits = asyncio.new_event_loop()
        threading.Thread(target=waits.run_forever, name="http-native-waits",
                         daemon=True).start()
        direct = self.handoff == "direct"
        self._front = front = native.Front(self.host, self.port, self.upstream, EVENTS_PATH,
                                           limits.body_bytes_max(EVENTS_PATH),
                                           (status, headers, body), self.threads,
                                           _server_of(hot, waits) if direct else None,
                                           self.keep_alive_s)
        self.port = front.port
        if not direct:
            self._drainer = threading.Thread(target=_drain, args=(front, hot, waits),
                                             name="http-native-py", daemon=True)
            self._drainer.start()

    def close(self) -> None:
        front, self._front = self._front, None
        if front is None:
            return
        front.close(close_timeout_s)
        if self._drainer is not None:
            self._drainer.join(timeout=close_timeout_s)
        if self._waits is not None:
            self._waits.call_soon_threadsafe(self._waits.stop)


def _server_of(hot: HotPath, waits: asyncio.AbstractEventLoop) -> Any:
    """``serve(reply, query, authorization, content_type, body)``: one hot request through
    ``HotPath.serve_order`` (the node's thread answers it), or forwarded."""
    serve_order = hot.serve_order

    def serve(reply: Any, query: bytes | None, authorization: str | None,
              content_type: str | None, body: bytes) -> None:
        try:
            if not serve_order(query, authorization, content_type, body, reply.respond, waits):
                reply.forward()
        except Exception:  # noqa: BLE001 - one request's failure must not stop the front
            log.exception("serving an order failed")
            reply.respond(*INTERNAL_ERROR)

    return serve


def _drain(front: Any, hot: HotPath, waits: asyncio.AbstractEventLoop) -> None:
    """The Python thread of the front (``batch`` hand-off): takes the hot requests in
    batches and serves each."""
    serve = _server_of(hot, waits)
    while True:
        batch = front.next_batch(batch_max, 1.0)
        if batch is None:
            return
        for request in batch:
            serve(*request)


class _Server(uvicorn.Server):
    """uvicorn on the front's Unix socket: the front listens once uvicorn started (the
    service is up) and stops before uvicorn shuts the service down."""

    def __init__(self, config: uvicorn.Config, front: NativeFront, hot: HotPath) -> None:
        super().__init__(config)
        self.front = front
        self.hot = hot

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        try:
            self.front.start(self.hot)
        except (OSError, RuntimeError) as exc:  # the address is taken, or no crate: stop
            log.error("the native front end cannot listen: %s", exc)
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await asyncio.to_thread(self.front.close)  # uvicorn still answers what it forwards
        await super().shutdown(sockets=sockets)


def serve_native(service: Any, settings: Any, log_level: str) -> None:
    """Serve ``service`` on ``settings.host:settings.port`` through the native front end."""
    from runner.api.app import create_app
    from runner.api.transport import HttpToolsProtocol

    sock_dir = tempfile.mkdtemp(prefix="railflow-http-")  # 0700: only this user gets in
    path = os.path.join(sock_dir, "app.sock")
    app = create_app(service, on_started=gcpolicy.settle)
    front = NativeFront(settings.host, settings.port, path, settings.native_http_threads,
                        settings.native_http_handoff, settings.http_keep_alive_s)
    config = uvicorn.Config(app, uds=path, http=HttpToolsProtocol, loop="uvloop",
                            log_level=log_level, access_log=False, proxy_headers=True,
                            forwarded_allow_ips="*", server_header=False, date_header=False,
                            timeout_keep_alive=upstream_keep_alive_s)
    try:
        _Server(config, front, app.hot).run()
    finally:
        front.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
