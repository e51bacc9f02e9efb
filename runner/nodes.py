"""Start and stop a cluster of runner nodes as processes (``make cluster-nodes``, tests, bench).

``python -m runner.nodes up [--nodes 3]`` starts ``railflow serve`` in cluster mode on ports
8001.. (``infra.endpoints.API_CLUSTER_NODES``) against the infra/ cluster, waits until one
leads, prints the demo key, and stops the nodes on Ctrl-C. Programs use ``NodeCluster``.
Every node shares the data directory's ``auth.json`` (keys are created before the nodes start)
and its ``cluster-secrets.json`` (random app, token and cluster secrets made on first start and
passed to every node: cluster mode refuses the defaults), and keeps its own state under
``<data_dir>/<node_id>``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from runner.auth import AuthStore
from runner.cli import demo_credentials
from runner.settings import DEMO_SECRETS

ready_timeout_s = 120.0
stop_timeout_s = 15.0


def cluster_secrets(data_dir: Path) -> dict[str, str]:
    """The secrets every node of this data directory shares, created once (owner-only file)."""
    path = data_dir / "cluster-secrets.json"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({name: secrets.token_urlsafe(32) for name in DEMO_SECRETS}))
        tmp.chmod(0o600)
        tmp.replace(path)
    return json.loads(path.read_text())


def secrets_env(data_dir: Path) -> dict[str, str]:
    return {f"RAILFLOW_{name.upper()}": value for name, value in cluster_secrets(data_dir).items()}


def free_base_port(count: int = 3) -> int:
    """A base port with ``count`` free ports after it (other runs may hold 8001-8003)."""
    import random
    import socket

    for base in random.sample(range(20_000, 40_000, 10), 200):
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def _die_with_parent() -> None:
    """Linux: the node gets SIGTERM when the launching process dies (no orphan nodes)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class NodeProc:
    node_id: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class NodeCluster:
    """Nodes of one log (Kafka topic); keys in ``data_dir/auth.json``."""

    data_dir: Path
    topic: str
    nodes_count: int = 3
    base_port: int = 8001
    env: dict[str, str] = field(default_factory=dict)
    # node i (from 0) waits i times this long after a capture before writing its checkpoint
    checkpoint_stagger_s: float = 0.0
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    api_key: str = ""
    shared_secrets: dict[str, str] = field(default_factory=dict)
    password: str = ""

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.shared_secrets = cluster_secrets(self.data_dir)
        auth = AuthStore(self.data_dir / "auth.json", self.shared_secrets["token_secret"])
        self.api_key, self.password, _ = demo_credentials(self.data_dir, auth)
        for i in range(self.nodes_count):
            self.start_node(f"node-{i + 1}", self.base_port + i)
        self.wait_ready()

    def start_node(self, node_id: str, port: int) -> NodeProc:
        env = dict(os.environ, RAILFLOW_MODE="cluster", RAILFLOW_NODE_ID=node_id,
                   RAILFLOW_PORT=str(port), RAILFLOW_DATA_DIR=str(self.data_dir),
                   RAILFLOW_KAFKA_TOPIC=self.topic,
                   RAILFLOW_ELECTION_PATH=f"/railflow/{self.topic}/leader",
                   **secrets_env(self.data_dir), **self.env)
        # the nodes share this machine's cores: each flushes to DuckDB at its own moment
        env.setdefault("RAILFLOW_FLUSH_PHASE",
                       str((port - self.base_port) / self.nodes_count % 1.0))
        if self.checkpoint_stagger_s:
            env["RAILFLOW_CHECKPOINT_WRITE_DELAY_S"] = str(
                (port - self.base_port) * self.checkpoint_stagger_s)
        log_path = self.data_dir / f"{node_id}.log"
        out = open(log_path, "ab")
        proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)
        node = NodeProc(node_id, port, proc, log_path)
        self.nodes[node_id] = node
        return node

    def health(self, node: NodeProc) -> dict | None:
        try:
            return httpx.get(node.url + "/healthz", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self) -> NodeProc | None:
        for node in self.nodes.values():
            h = self.health(node) if node.alive() else None
            if h and h["role"] == "leader" and h["status"] == "ok":
                return node
        return None

    def wait_ready(self, timeout_s: float = ready_timeout_s) -> NodeProc:
        """Until one node leads and every live node answers; returns the leader."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = [n for n in self.nodes.values() if n.alive()]
            if not live:
                raise RuntimeError(f"every node exited; see logs in {self.data_dir}")
            leader = self.leader()
            if leader and all(self.health(n) for n in live):
                return leader
            time.sleep(0.5)
        raise TimeoutError(f"no leader within {timeout_s} s; see logs in {self.data_dir}")

    def kill(self, node: NodeProc, sig: int = signal.SIGKILL) -> None:
        if node.alive():
            node.proc.send_signal(sig)
            node.proc.wait(timeout=stop_timeout_s)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.alive():
                node.proc.send_signal(signal.SIGINT)
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.nodes")
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--topic", default="railflow-log")
    parser.add_argument("--data-dir", type=Path, default=Path(".railflow-cluster"))
    args = parser.parse_args(argv)
    cluster = NodeCluster(args.data_dir, args.topic, args.nodes)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    cluster.start()
    leader = cluster.wait_ready()
    print(f"{args.nodes} nodes up; leader {leader.node_id} at {leader.url}")
    for node in cluster.nodes.values():
        print(f"  {node.node_id}: {node.url}  (log {node.log_path})")
    print(f"  demo client API key: {cluster.api_key}  ({args.data_dir / 'demo-api-key'})")
    print("Ctrl-C stops the nodes.")
    try:
        while all(n.alive() for n in cluster.nodes.values()):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
