"""A replog node process over the reference DuckDB machine, with a tiny HTTP API.

Used by the real-cluster fault tests and the round-trip benchmark:
``python -m replog.testing.node --node-id n1 --port 8101 --topic T --election-path /replog/T``.

- ``POST /submit`` ``{"kind": "kv", "payload": "<json op>", "timeout_s": 2}`` → ``{"offset",
  "writer_id", "effects", "applied_offset"}``; a follower forwards to the leader; errors are
  503 ``{"error": "NotLeader" | "Fenced" | ..., "leader_url"}``.
- ``GET /read?key=K&min_offset=N`` (read-your-writes), ``GET /status``, ``GET /applied``
  (offset, writer_id, seq of each applied entry), ``GET /digests`` (every
  ``--digest-every`` offsets), ``GET /dump`` (the whole table).
- ``POST /nemesis/expire-session`` ends this node's ZooKeeper session from outside (a fault).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from replog import Applied, Entry, Node, ReplogError
from replog import errors as replog_errors
from replog.testing.dictkv import DictKV
from replog.testing.kv import DuckKV

forward_timeout_margin_s = 0.5
gil_switch_interval_s = 0.0005  # short thread handoffs (the default is 5 ms)


class HttpForwarder:
    """Forwards a submit to the leader's ``/submit``; the leader never forwards again."""

    def __init__(self) -> None:
        self._client = httpx.Client(timeout=10.0)

    def forward(self, leader_url: str, kind: str, payload: bytes, timeout_s: float) -> Applied:
        try:
            r = self._client.post(
                f"{leader_url}/submit",
                json={"kind": kind, "payload": payload.decode(), "timeout_s": timeout_s},
                headers={"x-forwarded": "1"},
                timeout=timeout_s + forward_timeout_margin_s,
            )
        except httpx.HTTPError as e:
            raise replog_errors.NotLeader(f"leader unreachable: {e}", leader_url) from e
        body = r.json()
        if r.status_code != 200:
            cls = getattr(replog_errors, body.get("error", ""), replog_errors.ReplogError)
            if not (isinstance(cls, type) and issubclass(cls, ReplogError)):
                cls = ReplogError
            raise cls(body.get("message", "forward failed"))
        return Applied(body["offset"], body["writer_id"], body["effects"])


class Replica:
    """The node plus what the fault tests read back: applied entries and digests."""

    def __init__(self, node_factory, digest_every: int, machine: str = "duckdb"):
        self.sm: DuckKV | DictKV = DuckKV() if machine == "duckdb" else DictKV()
        self._lock = threading.Lock()
        self._cursor = self.sm.con.cursor() if isinstance(self.sm, DuckKV) else None
        self.applied: list[tuple[int, int, int]] = []
        self.digests: dict[int, str] = {}
        self.digest_every = digest_every
        self.node: Node = node_factory(self.sm, self._on_effects)

    def rows(self, key: str | None = None) -> list[tuple[str, int]]:
        """The table, or one key's row; reads run beside the loop thread."""
        if self._cursor is None:
            data = dict(self.sm.data)  # type: ignore[union-attr]
            items = (
                sorted(data.items()) if key is None else [(key, data[key])] if key in data else []
            )
            return items
        with self._lock:
            if key is None:
                return self._cursor.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
            return self._cursor.execute("SELECT k, v FROM kv WHERE k = ?", [key]).fetchall()

    def _on_effects(self, entry: Entry, effects: list[Any]) -> None:
        self.applied.append((entry.offset, entry.writer_id, entry.seq))
        if entry.offset % self.digest_every == 0:
            self.digests[entry.offset] = self.sm.digest()


def make_handler(rep: Replica):
    node = rep.node

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path == "/nemesis/expire-session":
                from replog.testing.zkfaults import expire_session

                election = node.election
                expire_session(election._zk, election.hosts)  # noqa: SLF001 - a test fault
                self._send(200, {"expired": True})
                return
            length = int(self.headers.get("content-length", "0"))
            req = json.loads(self.rfile.read(length))
            timeout_s = float(req.get("timeout_s", 2.0))
            if (
                self.headers.get("x-forwarded")
                and not node.is_leader
                and node.role.value == "follower"
            ):
                self._send(503, {"error": "NotLeader", "message": "forwarded to a follower"})
                return
            fut = node.submit(req["kind"], req["payload"].encode(), timeout_s)
            try:
                applied = fut.result(timeout_s + 2 * forward_timeout_margin_s)
            except ReplogError as e:
                self._send(
                    503,
                    {"error": type(e).__name__, "message": str(e), "leader_url": node.leader_url()},
                )
                return
            except Exception as e:  # a future that never resolved, or a transport error
                self._send(503, {"error": "ReplogError", "message": repr(e)})
                return
            self._send(
                200,
                {
                    "offset": applied.offset,
                    "writer_id": applied.writer_id,
                    "effects": applied.effects,
                    "applied_offset": node.applied_offset,
                },
            )

        def do_GET(self) -> None:
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/status":
                self._send(
                    200,
                    {
                        "node_id": node.node_id,
                        "role": node.role.value,
                        "writer_id": node.writer_id,
                        "my_writer_id": node.my_writer_id,
                        "applied_offset": node.applied_offset,
                        "leader_url": node.leader_url(),
                        "failure": repr(node.failure) if node.failure else None,
                    },
                )
            elif url.path == "/read":
                ok = node.wait_applied(int(q.get("min_offset", -1)), float(q.get("timeout_s", 2)))
                rows = rep.rows(q["key"])
                self._send(
                    200 if ok else 504,
                    {
                        "value": rows[0][1] if rows else None,
                        "applied_offset": node.applied_offset,
                        "writer_id": node.writer_id,
                    },
                )
            elif url.path == "/applied":
                self._send(200, list(rep.applied))
            elif url.path == "/digests":
                self._send(200, {str(k): v for k, v in list(rep.digests.items())})
            elif url.path == "/dump":
                self._send(200, {"applied_offset": node.applied_offset, "rows": rep.rows()})
            else:
                self._send(404, {"error": "not found"})

    return Handler


def main(argv: list[str] | None = None) -> None:
    from infra import endpoints
    from replog.kafka import KafkaLog
    from replog.zk import ZkElection

    p = argparse.ArgumentParser(description="a replog test node")
    p.add_argument("--node-id", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--election-path", required=True)
    p.add_argument("--zk", default=endpoints.ZOOKEEPER)
    p.add_argument("--kafka", default=endpoints.KAFKA_BOOTSTRAP)
    p.add_argument("--session-timeout-s", type=float, default=4.0)
    p.add_argument("--digest-every", type=int, default=50)
    p.add_argument("--machine", choices=("duckdb", "dict"), default="duckdb")
    a = p.parse_args(argv)
    sys.setswitchinterval(gil_switch_interval_s)
    logging.basicConfig(level=logging.WARNING, format=f"{a.node_id} %(levelname)s %(message)s")
    url = f"http://127.0.0.1:{a.port}"

    def factory(sm, on_effects):
        return Node(
            sm,
            KafkaLog(a.kafka, a.topic),
            ZkElection(a.zk, a.election_path, a.session_timeout_s),
            node_id=a.node_id,
            advertise_url=url,
            forwarder=HttpForwarder(),
            on_effects=on_effects,
        )

    rep = Replica(factory, a.digest_every, a.machine)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(rep))
    server.daemon_threads = True
    rep.node.start()
    print(f"{a.node_id} serving on {url}", flush=True)
    try:
        server.serve_forever()
    finally:
        rep.node.stop()


if __name__ == "__main__":
    main()
