"""A cheap HTTP/1.1 client for the soak's open-loop load: keep-alive connections per node,
one request at a time on each, over asyncio protocols (uvloop when the caller installs it).

httpx costs about a millisecond of CPU per request; on a two-core machine shared with three
nodes and the JVM cluster that starved the soak of the load it meant to send. Here a request is
one ``transport.write`` of preformatted bytes and a response is parsed from the bytes that
arrive (status line, ``content-length``, body), about a tenth of that. Callers create one
``Pool`` per node URL inside their event loop, ``await pool.post(path, body, headers, timeout)``
to get ``(status, body bytes)`` and ``close()`` the pools at the end. Transport failures raise
``ConnectionError`` or ``TimeoutError``; the connection is dropped and a new one opened later.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

header_bytes_max = 64 * 1024  # a response whose headers exceed this is refused


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._need: int | None = None  # total bytes of the response once the headers are in
        self._status = 0
        self._body_at = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self._need is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > header_bytes_max:
                    self._fail(ConnectionError("response headers too large"))
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            try:
                self._status = int(head[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                self._fail(ConnectionError(f"bad status line {head[0][:80]!r}"))
                return
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
                elif name.strip().lower() == "transfer-encoding":
                    self._fail(ConnectionError("chunked responses are not supported"))
                    return
            self._body_at = end + 4
            self._need = self._body_at + length
        if len(self.buf) >= self._need:
            body = bytes(self.buf[self._body_at : self._need])
            del self.buf[: self._need]
            self._need = None
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result((self._status, body))

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()
        self.closed = True


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no answer in time"))


class Pool:
    """Keep-alive connections to one node; as many as requests in flight."""

    def __init__(self, url: str, connect_timeout_s: float = 5.0) -> None:
        u = urlparse(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.host_header = f"{self.host}:{self.port}".encode()
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()

    async def _conn(self) -> _Conn:
        while self._idle:
            c = self._idle.pop()
            if not c.closed:
                return c
            self._all.discard(c)
        loop = asyncio.get_running_loop()
        _, c = await asyncio.wait_for(
            loop.create_connection(_Conn, self.host, self.port), self.connect_timeout_s)
        self._all.add(c)
        return c

    async def post(self, path: str, body: bytes, headers: bytes,
                   timeout_s: float) -> tuple[int, bytes]:
        """``headers``: preformatted ``Name: value\\r\\n`` lines (content type, auth)."""
        c = await self._conn()
        loop = asyncio.get_running_loop()
        waiter = c.waiter = loop.create_future()
        c.transport.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host_header  # type: ignore[union-attr]
                          + b"\r\n" + headers + b"Content-Length: " + str(len(body)).encode()
                          + b"\r\n\r\n" + body)
        # A timer, not asyncio.wait_for: that costs a task per request.
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            result = await waiter
        except BaseException:
            c.transport.close()  # type: ignore[union-attr]  # a late answer must not be read as the next one
            self._all.discard(c)
            raise
        finally:
            timer.cancel()
        c.waiter = None
        if c.closed:
            self._all.discard(c)
        else:
            self._idle.append(c)
        return result

    def close(self) -> None:
        for c in self._all:
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle.clear()


# ---------------------------------------------------------------- cost check
_CANNED = (b'{"offset": 1, "duplicate": false, "runs": [{"run_id": "r-1", "decision": "approve", '
           b'"state": "done", "path": ["root", "approve"]}]}')


async def _canned_server(port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n")
                              if x.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(_CANNED)
                             + _CANNED)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _serve_canned(port: int) -> None:
    asyncio.run(_canned_server(port))


def main(argv: list[str] | None = None) -> int:
    """What the soak's generator costs: the soak's own load loop at ``--rate`` against a canned
    server in another process; prints the generator thread's CPU share (it must stay < 5 %)."""
    import argparse
    import json
    import multiprocessing
    import socket
    import threading
    import time
    from types import SimpleNamespace

    from bench import soak

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=300.0)
    p.add_argument("--duration", type=float, default=30.0)
    a = p.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = multiprocessing.get_context("spawn").Process(
        target=_serve_canned, args=(port,), daemon=True)
    server.start()
    time.sleep(1.0)
    node = SimpleNamespace(node_id="n1", url=f"http://127.0.0.1:{port}", alive=lambda: True)
    cluster = SimpleNamespace(nodes={"n1": node}, api_key="k")
    history = soak.History()
    try:
        load = soak._run_loop(soak.run_load(cluster, history, a.rate, a.duration,
                                            threading.Event(), 1))
    finally:
        server.terminate()
    print(json.dumps({"rate_per_s": a.rate, "acks": history.acks, **load}))
    return 0 if history.acks == load["sent"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
