"""A cheap HTTP/1.1 server that answers every request with one canned order reply.

What ``bench/loadgen_cost.py`` and ``tests/bench/test_loadgen.py`` drive ``bench/loadgen``
against: it reads each request's head and body (``Content-Length``) on kept-alive
connections and answers ``200`` with a body like an order's (``"decision":"accept"``), a
few µs of CPU per request, so the generator's own CPU can be measured at 2,000/s on a busy
machine. ``--idle-close-s`` closes a connection once it was idle that long (as uvicorn's
keep-alive timeout does); ``--break-every N`` answers every N-th request it reads with the
first line of a head only and closes the connection (a server that dies mid-answer);
``--delay-ms D`` answers each request D ms after it was read (a server of known latency). It
prints its port on stdout once it listens.

Usage: ``python bench/http_sink.py [--port 0] [--idle-close-s 5] [--break-every 0]
[--delay-ms 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

BODY = b'{"event_id":"x","runs":[{"run_id":"r","decision":"accept","score":1}]}'
REPLY = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
         + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)


class Sink(asyncio.Protocol):
    """One connection: answers each complete request in the order it came."""

    idle_close_s = 0.0
    break_every = 0
    delay_s = 0.0
    served = 0  # requests read over every connection (``break_every`` counts them)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buf = b""
        self.idle = None
        self._arm()

    def _arm(self) -> None:
        if self.idle_close_s:
            if self.idle is not None:
                self.idle.cancel()
            self.idle = asyncio.get_running_loop().call_later(self.idle_close_s,
                                                              self.transport.close)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        replies = 0
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            length = 0
            for line in self.buf[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buf) < end + 4 + length:
                break
            self.buf = self.buf[end + 4 + length:]
            Sink.served += 1
            if self.break_every and Sink.served % self.break_every == 0:
                self.transport.write(REPLY * replies + b"HTTP/1.1 200 OK\r\n")
                self.transport.close()
                return
            replies += 1
        if replies and self.delay_s:
            asyncio.get_running_loop().call_later(self.delay_s, self._reply, replies)
        elif replies:
            self._reply(replies)

    def _reply(self, replies: int) -> None:
        if not self.transport.is_closing():
            self.transport.write(REPLY * replies)
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", port,
                                                            backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle-close-s", type=float, default=0.0)
    parser.add_argument("--break-every", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    Sink.idle_close_s, Sink.break_every = args.idle_close_s, args.break_every
    Sink.delay_s = args.delay_ms / 1000
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
