"""The native HTTP front end (``runner.api.native``) against uvicorn, the reference.

Two embedded nodes run as ``railflow serve --http <server>`` processes, one per server; every
answer must be the same from both (orders with and without ``deadline_ms``, the 4xx naming the
field, 401, 413, malformed HTTP, the OpenAPI document and other forwarded routes), both must
close a connection idle for the keep-alive time, the front must keep connections alive until
then, answer pipelined requests in order, survive clients that go away early and bad input
(never a 500). One more node runs in this process to show which way each request took: an
order served by the front (handed to Python in batches or by a call per request), what it
declines and every other route by uvicorn behind it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
import uvicorn

from runner import limits
from runner.api import native
from runner.api.app import create_app
from runner.api.transport import HttpToolsProtocol
from runner.nodes import free_base_port
from runner.settings import Settings
from tests.runner.test_api_hot import BAD_BODIES, BAD_REQUESTS
from tests.runner.test_api_lean import _post, _responses

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ("uvicorn", "native")
ready_timeout_s = 120
KEEP_ALIVE_S = 2  # both nodes' RAILFLOW_HTTP_KEEP_ALIVE_S (uvicorn's default is 5)


def _start(server: str, data_dir: Path) -> tuple[subprocess.Popen, str, str]:
    port = free_base_port(1)
    env = dict(os.environ, RAILFLOW_MODE="embedded", RAILFLOW_DATA_DIR=str(data_dir),
               RAILFLOW_PORT=str(port), RAILFLOW_REQUEST_DEADLINE_MS_DEFAULT="1000",
               RAILFLOW_HTTP_KEEP_ALIVE_S=str(KEEP_ALIVE_S))
    env.pop("RAILFLOW_SERVER", None)
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "serve", "--http", server],
                            env=env, cwd=ROOT, stdout=open(data_dir / "node.log", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    key_file = data_dir / "demo-api-key"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, (data_dir / "node.log").read_text()
        try:
            if key_file.exists():
                key = key_file.read_text().strip()
                r = httpx.post(url + "/v1/events", json=_order(f"warm-{uuid.uuid4().hex}"),
                               headers={"Authorization": f"Bearer {key}"}, timeout=10)
                if r.status_code == 200 and r.json()["runs"]:  # the demo workflow is in
                    return proc, url, key
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise TimeoutError((data_dir / "node.log").read_text())


def _stop(proc: subprocess.Popen) -> bool:
    """SIGINT, as Ctrl-C; False if the node had to be killed."""
    proc.send_signal(2)
    try:
        proc.wait(timeout=30)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """server -> (url, key, data_dir) of a node served by it."""
    out, procs = {}, []
    try:
        for server in SERVERS:
            data_dir = tmp_path_factory.mktemp(f"native-{server}")
            proc, url, key = _start(server, data_dir)
            procs.append(proc)
            out[server] = (url, key, data_dir)
        yield out
    finally:
        stopped = [_stop(proc) for proc in procs]
    assert all(stopped), "a node did not stop on SIGINT"


def _order(event_id: str, **data) -> dict:
    return {"event_id": event_id, "type": "order",
            "data": {"card": "c-native", "customer": "u1", "merchant": "m1", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}


def _both(nodes, method: str, path: str, client: bool = True, headers: dict | None = None,
          **kwargs) -> list[httpx.Response]:
    """The same request to each node (``client``: with that node's client key unless the
    headers hold an Authorization)."""
    out = []
    for server in SERVERS:
        url, key, _ = nodes[server]
        sent = dict(headers or {})
        if client:
            sent.setdefault("Authorization", f"Bearer {key}")
        out.append(httpx.request(method, url + path, headers=sent, timeout=10, **kwargs))
    return out


def _same_error(a: httpx.Response, b: httpx.Response) -> None:
    assert 400 <= a.status_code < 500, a.text
    assert (a.status_code, a.json(), a.headers.get("www-authenticate"),
            a.headers.get("content-type")) == (
        b.status_code, b.json(), b.headers.get("www-authenticate"),
        b.headers.get("content-type"))


def test_an_order_answers_alike_through_the_front(nodes):
    event_id = f"nat-{uuid.uuid4().hex[:8]}"
    ref, front = _both(nodes, "POST", "/v1/events", json=_order(event_id))
    assert ref.status_code == front.status_code == 200, front.text
    a, b = ref.json(), front.json()
    assert b["event_id"] == event_id and not b["duplicate"] and b["runs"][0]["explanation"]
    assert [(r["decision"], r["state"], r["workflow_id"]) for r in a["runs"]] == [
        (r["decision"], r["state"], r["workflow_id"]) for r in b["runs"]]
    assert sorted(ref.headers) == sorted(front.headers)  # no Date or Server header either
    _, again = _both(nodes, "POST", "/v1/events", json=_order(event_id))
    assert again.json()["duplicate"] and again.json()["offset"] == b["offset"]
    # the forwarded read of the run answers as the reference does for its own
    run_id = b["runs"][0]["run_id"]
    url, key, _ = nodes["native"]
    run = httpx.get(f"{url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {key}"})
    assert run.status_code == 200 and run.json()["run_id"] == run_id


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_orders_get_the_reference_answer(nodes, body):
    _same_error(*_both(nodes, "POST", "/v1/events", content=body,
                       headers={"content-type": "application/json"}))


@pytest.mark.parametrize("params,headers", BAD_REQUESTS)
def test_bad_requests_get_the_reference_answer(nodes, params, headers):
    _same_error(*_both(nodes, "POST", "/v1/events", json=_order("nat-bad"), params=params,
                       headers=headers))


def test_no_key_is_401_alike(nodes):
    ref, front = _both(nodes, "POST", "/v1/events", client=False,
                       json=_order("nat-nokey"))
    assert front.status_code == 401
    _same_error(ref, front)


def test_a_field_too_long_is_refused_naming_it(nodes):
    ref, front = _both(nodes, "POST", "/v1/events", json=_order("nat-long", card="x" * 600))
    _same_error(ref, front)
    assert front.json()["detail"][0]["loc"] == ["body", "data", "card"]


def test_bodies_over_the_limit_are_413_naming_body(nodes):
    cap = limits.body_bytes_max("/v1/events")
    for server in SERVERS:
        url, key, _ = nodes[server]
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            # declared: refused before the body is sent at all
            s.sendall(f"POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
                      f"content-type: application/json\r\ncontent-length: {cap + 1}\r\n\r\n"
                      .encode())
            status, body = _responses(s, 1)[0]
            assert status == 413 and body["detail"][0]["loc"] == ["body"], (server, body)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            # streamed: counted as it comes; a chunk at a time until the answer comes, so the
            # server read all that was sent (a close with unread data would reset the answer)
            chunk = b"x" * 16_384
            s.sendall((f"POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
                       "transfer-encoding: chunked\r\n\r\n").encode())
            for _ in range(cap // len(chunk) + 2):
                s.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                s.settimeout(0.3)
                try:
                    first = s.recv(65536, socket.MSG_PEEK)
                except TimeoutError:
                    continue
                finally:
                    s.settimeout(10)
                if first:
                    break
            status, body = _responses(s, 1)[0]
            assert status == 413 and body["detail"][0]["loc"] == ["body"], (server, body)


def test_forwarded_routes_answer_alike(nodes):
    ref, front = _both(nodes, "GET", "/openapi.json", client=False)
    assert front.status_code == 200 and front.json() == ref.json()
    for server in SERVERS:
        url, _, data_dir = nodes[server]
        assert httpx.get(url + "/healthz", timeout=10).json()["status"] == "ok"
        password = (data_dir / "demo-console-password").read_text().strip()
        token = httpx.post(url + "/v1/auth/token", timeout=10,
                           json={"username": "demo", "password": password})
        assert token.status_code == 200, (server, token.text)
        me = httpx.get(url + "/v1/auth/me", timeout=10, headers={
            "Authorization": f"Bearer {token.json()['access_token']}"})
        assert me.status_code == 200 and me.json()["name"] == "demo"
        # orders answered by the front are counted by the node's telemetry all the same
        metrics = httpx.get(url + "/metrics", timeout=10).text
        count = next(line for line in metrics.splitlines()
                     if line.startswith("railflow_event_seconds_count"))
        assert float(count.split()[-1]) >= 1, (server, count)
    ref, front = _both(nodes, "GET", "/v1/no-such-route", client=False)
    assert front.status_code == ref.status_code == 404 and front.json() == ref.json()
    for _ in range(2):  # an answer without a body, and the connection used again after it
        ref, front = _both(nodes, "HEAD", "/healthz", client=False)
        assert front.status_code == ref.status_code and front.content == b""
    assert httpx.get(nodes["native"][0] + "/healthz", timeout=10).status_code == 200


def test_an_order_expecting_100_continue_is_served(nodes):
    host, port, key = _address(nodes)
    body = orjson.dumps(_order(f"expect-{uuid.uuid4().hex[:8]}"))
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(_post(key, body, extra=b"expect: 100-continue\r\n")[:-len(body)])
        assert s.recv(65536).startswith(b"HTTP/1.1 100")
        s.sendall(body)
        status, answer = _responses(s, 1)[0]
    assert status == 200 and answer["runs"]


def _address(nodes) -> tuple[str, int, str]:
    url, key, _ = nodes["native"]
    host, port = url.removeprefix("http://").split(":")
    return host, int(port), key


def test_keep_alive_and_pipelined_requests_answer_in_order(nodes):
    host, port, key = _address(nodes)
    tag = uuid.uuid4().hex[:8]
    with socket.create_connection((host, port), timeout=10) as s:
        for i in range(3):  # one after the other on one connection
            s.sendall(_post(key, orjson.dumps(_order(f"ka-{tag}-{i}"))))
            status, body = _responses(s, 1)[0]
            assert status == 200 and body["event_id"] == f"ka-{tag}-{i}"
        # pipelined: an order, a bad one (forwarded), a query (forwarded), an order
        s.sendall(_post(key, orjson.dumps(_order(f"ka-{tag}-a")))
                  + _post(key, b'{"event_id": "x", "data": {}}')
                  + _post(key, orjson.dumps(_order(f"ka-{tag}-b")),
                          "/v1/events?deadline_ms=900")
                  + _post(key, orjson.dumps(_order(f"ka-{tag}-c"))))
        answers = _responses(s, 4)
    assert [(st, b.get("event_id")) for st, b in answers] == [
        (200, f"ka-{tag}-a"), (422, None), (200, f"ka-{tag}-b"), (200, f"ka-{tag}-c")]
    assert answers[1][1]["detail"][0]["loc"] == ["body", "type"]


def test_clients_that_go_away_early_leave_the_front_serving(nodes):
    host, port, key = _address(nodes)
    event_id = f"gone-{uuid.uuid4().hex[:8]}"
    body = orjson.dumps(_order(event_id))
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(_post(key, body))  # and leaves before its answer
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(_post(key, body)[:-10])  # leaves in the middle of the body
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"POST /v1/events HTTP/1.1\r\nhost: x\r\n")  # in the middle of the head
    url = f"http://{host}:{port}"
    for sent in (event_id, f"after-{event_id}"):  # once read whole, an order is applied
        r = httpx.post(url + "/v1/events", json=_order(sent), timeout=10,
                       headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["runs"], r.text


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer \xff\xfe\r\n"
    b"content-length: 2\r\n\r\n{}",
    b"GET /../../etc/passwd HTTP/1.1\r\nhost: x\r\n\r\n",
    b"POST /v1/events?deadline_ms=%ff HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
])
def test_bad_input_is_never_a_500(nodes, raw):
    host, port, key = _address(nodes)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    if data:  # an answer, or the connection closed without one
        status = int(data.split(b" ", 2)[1])
        assert 400 <= status < 500, data
    r = httpx.post(f"http://{host}:{port}/v1/events", json=_order("after-bad"), timeout=10,
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200  # the front still serves


def test_orders_with_a_deadline_answer_alike(nodes):
    tag = uuid.uuid4().hex[:8]
    # a run left waiting for a review (settled: answered at once) and one decided at once;
    # a card of its own each (the nodes' other orders count towards a card's velocity)
    review = dict(amount=300_000, country="NG", channel="card-not-present")
    for data, deadline_ms in ((review, 300), ({}, 30_000), ({}, 1)):
        event_id = f"dl-{tag}-{deadline_ms}"
        ref, front = _both(nodes, "POST", "/v1/events", params={"deadline_ms": deadline_ms,
                                                                 "other": "ignored"},
                           json=_order(event_id, card=f"c-{event_id}", **data))
        assert ref.status_code == front.status_code == 200, front.text
        a, b = ref.json(), front.json()
        assert b["event_id"] == event_id and not b["duplicate"]
        assert [(r["decision"], r["state"], r["waiting_for"], r["workflow_id"])
                for r in a["runs"]] == [
            (r["decision"], r["state"], r["waiting_for"], r["workflow_id"]) for r in b["runs"]]
        assert sorted(ref.headers) == sorted(front.headers)
    assert b["runs"] and b["runs"][0]["state"] == "decided"
    # past the route's bounds, each server gives the route's 422 naming the parameter
    for value in ("30001", "-1", "", "1.5"):
        ref, front = _both(nodes, "POST", "/v1/events", json=_order(f"dl-{tag}-bad"),
                           params={"deadline_ms": value})
        _same_error(ref, front)
        assert front.json()["detail"][0]["loc"] == ["query", "deadline_ms"], value


def _exchange(url: str, *parts: bytes) -> list[tuple[int, dict, bytes]]:
    """Send each part once the answer to the one before came (uvicorn drops the answers it
    owes when it meets bad HTTP behind them), then read every answer until the server closes
    the connection."""
    host, port = url.removeprefix("http://").split(":")
    data, out = b"", []
    with socket.create_connection((host, int(port)), timeout=20) as s:
        for i, part in enumerate(parts):
            while len(out) < i:  # the answers to the parts before this one
                chunk = s.recv(65536)
                assert chunk, (out, data)
                got, data = _answers(data + chunk)
                out += got
            s.sendall(part)
        while chunk := s.recv(65536):  # the server closes it (keep-alive at the latest)
            data += chunk
    return out + _answers(data)[0]


def _answers(data: bytes) -> tuple[list[tuple[int, dict, bytes]], bytes]:
    """The whole answers at the start of ``data`` (each with a content-length), and the rest."""
    out = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.decode("latin-1").lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", 0))
        if len(rest) < length:
            break
        out.append((int(lines[0].split(b" ")[1]), headers, rest[:length]))
        data = rest[length:]
    return out, data


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nho st: x\r\n\r\n",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n",
    b"get /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    b"GET /healthz HTTP/9.9\r\nhost: x\r\n\r\n",
    b"GET /caf\xc3\xa9 HTTP/1.1\r\nhost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nhost: x\x00y\r\n\r\n",
    b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n",  # hyper's 414, httptools' 400
    # a broken chunk in an order's body (read by the front) and in a forwarded route's
    b"POST /v1/events HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"POST /v1/workflows HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    # after a good request on the same connection
    (b"GET /v1/no-such-route HTTP/1.1\r\nhost: x\r\n\r\n", b"GARBAGE\r\n\r\n"),
]


@pytest.mark.parametrize("raw", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_http_is_answered_as_uvicorn_answers_it(nodes, raw):
    parts = raw if isinstance(raw, tuple) else (raw,)
    ref, front = (_exchange(nodes[server][0], *parts) for server in SERVERS)
    assert len(front) == len(parts)
    assert front == ref
    status, headers, body = front[-1]
    assert (status, body, headers["content-type"], headers["connection"]) == (
        400, b"Invalid HTTP request received.", "text/plain; charset=utf-8", "close")


def test_too_many_headers_get_a_clear_431_from_the_front(nodes):
    """uvicorn (httptools) has no bound on a request's headers; the front keeps hyper's
    (100), answering 431 with a message that says so."""
    raw = (b"GET /v1/no-such-route HTTP/1.1\r\nhost: x\r\n"
           + b"".join(b"x-h%d: 1\r\n" % i for i in range(120)) + b"\r\n")
    (status, headers, body), = _exchange(nodes["native"][0], raw)
    assert (status, headers["connection"]) == (431, "close")
    assert b"more than 100 headers" in body
    assert _exchange(nodes["uvicorn"][0], raw)[0][0] == 404


@pytest.mark.parametrize("server", SERVERS)
def test_an_idle_connection_is_closed_after_the_keep_alive_time(nodes, server):
    url, key, _ = nodes[server]
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        for i in range(2):  # kept alive between requests
            s.sendall(_post(key, orjson.dumps(_order(f"idle-{uuid.uuid4().hex[:8]}-{i}"))))
            status, _ = _responses(s, 1)[0]
            assert status == 200
        answered = time.monotonic()
        assert s.recv(65536) == b""  # the server closed it (a timeout here fails the test)
        # closed by the keep-alive timer (started as the answer went), not at once
        assert time.monotonic() - answered >= KEEP_ALIVE_S - 0.5


def test_a_connection_that_never_sends_is_closed_by_the_front(nodes):
    host, port, _ = _address(nodes)
    with socket.create_connection((host, port), timeout=20) as s:
        assert s.recv(65536) == b""  # hyper's head timer runs from the connection's opening


class _Seen:
    """Stands in for the application's ``HotPath``: notes what the front's Python thread
    served and what reached the application by ASGI."""

    def __init__(self, hot) -> None:
        self.hot, self.asgi, self.served, self.declined = hot, [], 0, 0
        self.serve, self.lean = hot.serve, hot.lean

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.asgi.append((scope["method"], scope["path"], scope.get("client")))
        await self.hot(scope, receive, send)

    def serve_order(self, *args) -> bool:
        served = self.hot.serve_order(*args)
        self.served += served
        self.declined += not served
        return served


@pytest.mark.parametrize("handoff", ["batch", "direct"])
def test_orders_are_served_by_the_front_the_rest_by_uvicorn(tmp_path, handoff):
    settings = Settings(data_dir=tmp_path, port=free_base_port(1),
                        request_deadline_ms_default=1000)
    app = create_app(settings=settings)
    seen = app.hot = _Seen(app.hot)
    sock_dir = tempfile.mkdtemp(prefix="rf-test-")
    path = os.path.join(sock_dir, "app.sock")
    front = native.NativeFront("127.0.0.1", 0, path, handoff=handoff)
    config = uvicorn.Config(app, uds=path, http=HttpToolsProtocol, loop="asyncio",
                            log_level="warning", access_log=False, proxy_headers=True,
                            forwarded_allow_ips="*")
    server = native._Server(config, front, seen)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not (server.started and front.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert front.port, "the front did not start"
        svc = app.state.service
        key = svc.auth.create_key("native-tests")
        svc.wait_workflows(ready_timeout_s)
        url = f"http://127.0.0.1:{front.port}"
        auth = {"Authorization": f"Bearer {key}"}
        r = httpx.post(url + "/v1/events", json=_order("in-1"), headers=auth, timeout=10)
        assert r.status_code == 200 and r.json()["runs"], r.text
        assert (seen.served, seen.declined, seen.asgi) == (1, 0, [])
        r = httpx.post(url + "/v1/events", json=_order("in-2"), timeout=10,
                       headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        assert (seen.served, seen.declined) == (1, 1)
        assert [a[:2] for a in seen.asgi] == [("POST", "/v1/events")]
        assert seen.asgi[0][2][0] == "127.0.0.1"  # the client's address, forwarded
        r = httpx.post(url + "/v1/events", json=_order("in-1"), headers=auth, timeout=10,
                       params={"deadline_ms": 800})
        assert r.status_code == 200 and r.json()["duplicate"]
        assert seen.served == 2 and len(seen.asgi) == 1  # a deadline: served by the front
        r = httpx.post(url + "/v1/events", json=_order("in-3"), headers=auth, timeout=10,
                       params={"deadline_ms": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "deadline_ms"]
        assert (seen.served, seen.declined, len(seen.asgi)) == (2, 2, 2)  # the route judged it
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert not thread.is_alive()
    with pytest.raises(httpx.ConnectError):  # the front stopped listening
        httpx.get(f"http://127.0.0.1:{front.port}/healthz", timeout=5)
