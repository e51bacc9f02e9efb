"""``runner.api.transport``: an answer's head and body leave in one write, and nothing is lost
or reordered (a lone head, keep-alive, HEAD, 204, a streamed body) under a real uvicorn."""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from runner.api.transport import HeldWriteTransport, HttpToolsProtocol


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_head_and_body_one_write_lone_head_next_iteration_close_flushes():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        raw = Recording()
        t = HeldWriteTransport(raw, loop)  # type: ignore[arg-type]
        t.write(b"HEAD\r\n\r\n")
        assert raw.writes == [] and t.get_write_buffer_size() == 8
        t.write(b"body")
        assert raw.writes == [b"HEAD\r\n\r\nbody"]
        await asyncio.sleep(0)
        assert raw.writes == [b"HEAD\r\n\r\nbody"]  # the scheduled flush found nothing
        t.write(b"lone")
        await asyncio.sleep(0)
        assert raw.writes[-1] == b"lone"
        t.write(b"last")
        t.close()
        assert raw.writes[-1] == b"last" and raw.closed
        await asyncio.sleep(0)
        assert raw.writes.count(b"last") == 1
        assert t.get_extra_info("peername") == "info:peername"

    asyncio.run(main())


async def _app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"]
            await send({"type": f"{kind}.complete"})
            if kind == "lifespan.shutdown":
                return
    path = scope["path"]
    if path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    body = path.encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def test_real_uvicorn_answers_whole_in_order():
    async def main() -> None:
        config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=HttpToolsProtocol,
                                loop="asyncio", log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]

        def client() -> list[bytes]:
            out = []
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /bb HTTP/1.1\r\nhost: x\r\n\r\n")
                out.append(_read_until(s, b"/bb"))
                s.sendall(b"HEAD /ccc HTTP/1.1\r\nhost: x\r\n\r\n")
                out.append(_read_until(s, b"\r\n\r\n"))
                s.sendall(b"GET /empty HTTP/1.1\r\nhost: x\r\n\r\n")
                out.append(_read_until(s, b"\r\n\r\n"))
                s.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
                out.append(_read_until(s, b"0\r\n\r\n"))
                s.sendall(b"GET /z HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                out.append(data)
            return out

        try:
            pair, head, empty, stream, closing = await asyncio.to_thread(client)
        finally:
            server.should_exit = True
            await task
        assert pair.count(b"HTTP/1.1 200") == 2
        assert pair.index(b"\r\n\r\n/a") < pair.index(b"\r\n\r\n/bb")
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: 4" in head
        assert empty.startswith(b"HTTP/1.1 204")
        assert stream.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in stream
        assert stream.endswith(b"4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n")
        assert closing.startswith(b"HTTP/1.1 200") and closing.endswith(b"\r\n\r\n/z")

    asyncio.run(main())
