"""``runner.api.transport``: under a real uvicorn, an order is served without ASGI (no task,
no FastAPI, not even ``HotPath.__call__``) and answers as the ASGI path does; whatever does not
fit (a query, a chunked body, a bad body or key, a request behind another) goes the ASGI way,
and answers on one connection keep their order."""

from __future__ import annotations

import asyncio
import socket

import orjson
import uvicorn

from runner.api.app import create_app
from runner.api.transport import HttpToolsProtocol
from runner.settings import Settings

ready_timeout_s = 60


class _Seen:
    """Stands in for the application's ``HotPath``: notes what reached it by ASGI."""

    def __init__(self, hot) -> None:
        self.hot, self.asgi, self.served = hot, [], 0
        self.serve, self.lean = hot.serve, hot.lean

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.asgi.append((scope["method"], scope["path"]))
        await self.hot(scope, receive, send)

    def serve_order_now(self, scope, body, answer) -> bool:
        served = self.hot.serve_order_now(scope, body, answer)
        self.served += served
        return served


def _order(event_id: str, **data) -> bytes:
    return orjson.dumps({"event_id": event_id, "type": "order", "data": data})


def _post(key: str, body: bytes, target: str = "/v1/events", extra: bytes = b"") -> bytes:
    return (f"POST {target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n").encode() \
        + extra + b"\r\n" + body


def _responses(sock: socket.socket, count: int) -> list[tuple[int, dict]]:
    """``count`` answers (each with a content-length) read off the connection, in order."""
    data, out = b"", []
    while len(out) < count:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
        while b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            if len(rest) < length:
                break
            out.append((int(head.split(b" ")[1]), orjson.loads(rest[:length])))
            data = rest[length:]
    return out


def test_orders_are_served_without_asgi_and_the_rest_as_before(tmp_path):
    app = create_app(settings=Settings(data_dir=tmp_path, port=8993,
                                       request_deadline_ms_default=1000))
    seen = app.hot = _Seen(app.hot)

    async def main() -> None:
        # As runner.cli serves (a proxy-headers middleware in front, or an access log: no
        # lean path).
        config = uvicorn.Config(app, host="127.0.0.1", port=0, http=HttpToolsProtocol,
                                loop="asyncio", log_level="warning", lifespan="on",
                                proxy_headers=False, access_log=False)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        svc = app.state.service
        key = svc.auth.create_key("lean-tests")
        await asyncio.to_thread(svc.wait_workflows, ready_timeout_s)

        def client() -> dict:
            out = {}
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(_post(key, _order("lean-1", card="c1", amount=10)))
                out["first"] = _responses(s, 1)[0]
                out["lean_after_first"] = seen.served
                s.sendall(_post(key, _order("lean-1", card="c1", amount=10)))
                out["again"] = _responses(s, 1)[0]
                s.sendall(_post(key, _order("lean-1", card="c1", amount=10),
                                "/v1/events?deadline_ms=900"))
                out["again_asgi"] = _responses(s, 1)[0]
                # Three at once: an order, a query (ASGI), an order; answers in this order.
                s.sendall(_post(key, _order("lean-2", card="c2"))
                          + _post(key, _order("lean-3", card="c3"),
                                  "/v1/events?deadline_ms=500")
                          + _post(key, _order("lean-4", card="c4")))
                out["three"] = _responses(s, 3)
                s.sendall(_post(key, b'{"event_id": "lean-5", "data": {}}'))
                out["no_type"] = _responses(s, 1)[0]
                s.sendall(_post("not-a-key", _order("lean-6")))
                out["bad_key"] = _responses(s, 1)[0]
                s.sendall(_post(key, _order("lean-7", card="x" * 600)))
                out["long_card"] = _responses(s, 1)[0]
                body = _order("lean-8", card="c8")
                s.sendall(b"POST /v1/events HTTP/1.1\r\nhost: x\r\n"
                          + f"authorization: Bearer {key}\r\n".encode()
                          + b"transfer-encoding: chunked\r\n\r\n"
                          + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
                out["chunked"] = _responses(s, 1)[0]
            return out

        try:
            out = await asyncio.to_thread(client)
        finally:
            server.should_exit = True
            await task
        status, first = out["first"]
        assert status == 200 and first["event_id"] == "lean-1" and not first["duplicate"]
        assert first["runs"] and first["runs"][0]["explanation"]  # the demo workflow ran
        assert out["lean_after_first"] == 1
        status, again = out["again"]
        assert status == 200 and again["duplicate"] and again["offset"] == first["offset"]
        assert out["again_asgi"] == out["again"]  # the ASGI path answers alike
        assert [(s, b["event_id"]) for s, b in out["three"]] == [
            (200, "lean-2"), (200, "lean-3"), (200, "lean-4")]
        status, no_type = out["no_type"]
        assert status == 422 and no_type["detail"][0]["loc"] == ["body", "type"]
        assert out["bad_key"][0] == 401
        status, long_card = out["long_card"]  # refused by the lean path's own checks
        assert status == 413 or status == 422
        assert long_card["detail"][0]["loc"] == ["body", "data", "card"]
        assert out["chunked"][0] == 200 and out["chunked"][1]["event_id"] == "lean-8"
        # ASGI saw what the lean path declined (the queries, the order pipelined behind one,
        # the bad body and key, the chunked body); the lean path served the other four.
        assert seen.asgi == [("POST", "/v1/events")] * 6
        assert seen.served == 4

    asyncio.run(main())
