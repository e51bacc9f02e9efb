"""Runs replog test nodes as processes and records a history of requests and outcomes.

For the real-cluster fault tests: ``NodeProcesses`` starts ``python -m replog.testing.node``
per node (each in its own process group, so the test can kill -9 or SIGSTOP exactly its own
node), ``Load`` sends writes from client threads and records each invocation with its outcome,
and ``collect`` gathers what the checkers need after the run.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import httpx

from replog.entry import Entry
from replog.testing import checker, ops

start_timeout_s = 30.0
request_timeout_s = 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodeProcesses:
    def __init__(
        self,
        names: list[str],
        *,
        session_timeout_s: float,
        log_dir: str,
        zk: str,
        kafka: str,
        topic: str | None = None,
    ):
        self.topic = topic or f"replog-test-{uuid.uuid4().hex[:12]}"
        self.election_path = f"/replog-test/{self.topic}"
        self.session_timeout_s = session_timeout_s
        self.log_dir, self.zk, self.kafka = log_dir, zk, kafka
        self.ports = {n: free_port() for n in names}
        self.procs: dict[str, subprocess.Popen] = {}
        self.http = httpx.Client(timeout=request_timeout_s + 2)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> None:
        out = open(os.path.join(self.log_dir, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "replog.testing.node",
                "--node-id",
                name,
                "--port",
                str(self.ports[name]),
                "--topic",
                self.topic,
                "--election-path",
                self.election_path,
                "--zk",
                self.zk,
                "--kafka",
                self.kafka,
                "--session-timeout-s",
                str(self.session_timeout_s),
                "--digest-every",
                "20",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.status(name) is not None:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start; see {self.log_dir}/{name}.log")

    def status(self, name: str) -> dict | None:
        try:
            return self.http.get(f"{self.url(name)}/status", timeout=1.0).json()
        except (httpx.HTTPError, ValueError):
            return None

    def get(self, name: str, path: str):
        return self.http.get(f"{self.url(name)}{path}", timeout=10.0).json()

    def leader(self, exclude: frozenset[str] | set[str] = frozenset()) -> str | None:
        for name in self.procs:
            if name in exclude:
                continue
            s = self.status(name)
            if s is not None and s["role"] == "leader":
                return name
        return None

    def wait_leader(
        self, exclude: frozenset[str] | set[str] = frozenset(), timeout_s: float = 30.0
    ) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            name = self.leader(exclude)
            if name is not None:
                return name
            time.sleep(0.02)
        raise TimeoutError("no leader")

    def kill9(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def pause(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGCONT)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.http.close()

    def diagnostics(self, lines_max: int = 40) -> str:
        """Each node's status and the end of its log without the reconnect noise of a broker
        that is down: what a failed fault test prints so a failure on CI can be read."""
        parts = []
        for name in self.procs:
            parts.append(f"--- {name}: status {self.status(name)}")
            try:
                with open(os.path.join(self.log_dir, f"{name}.log"), errors="replace") as f:
                    lines = [ln.rstrip() for ln in f
                             if "Connection refused" not in ln and "not found in cache" not in ln]
            except OSError as e:
                lines = [f"(no log: {e})"]
            parts.extend(ln[:300] for ln in lines[-lines_max:])
        return "\n".join(parts)

    def wait_converged(self, timeout_s: float = 60.0) -> int:
        """Wait until every node applied the same offset; returns it."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            offsets = {self.status(n)["applied_offset"] for n in self.procs}  # type: ignore[index]
            if len(offsets) == 1:
                (offset,) = offsets
                if offset == last:
                    return offset
                last = offset
            time.sleep(0.5)
        raise TimeoutError(f"nodes did not converge: {offsets}")


@dataclass
class Invocation:
    id: str
    node: str
    key: str
    value: int
    t_invoke: float
    t_complete: float = 0.0
    outcome: str = "pending"  # ok | fail | info (unknown: timeout, connection reset)
    offset: int = -1
    writer_id: int = -1
    error: str = ""

    @property
    def payload(self) -> bytes:
        return ops.put(self.key, self.value)


class Load:
    """Client threads sending unique puts to random nodes at a bounded total rate."""

    def __init__(
        self, procs: NodeProcesses, *, threads: int = 6, rate_per_s: float = 150.0, seed: int = 0
    ):
        self.procs = procs
        self.threads = threads
        self.interval_s = threads / rate_per_s
        self.history: list[Invocation] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(timeout=request_timeout_s + 10)

    def _run(self, worker: int) -> None:
        client = httpx.Client(timeout=request_timeout_s + 2)
        names = list(self.procs.ports)
        i = 0
        while not self._stop.is_set():
            node = names[(worker + i) % len(names)]
            inv = Invocation(f"w{worker}-{i}", node, f"w{worker}-{i}", i, time.monotonic())
            with self._lock:
                self.history.append(inv)
            try:
                r = client.post(
                    f"{self.procs.url(node)}/submit",
                    json={
                        "kind": ops.KIND,
                        "payload": inv.payload.decode(),
                        "timeout_s": request_timeout_s,
                    },
                )
                body = r.json()
                if r.status_code == 200:
                    inv.outcome, inv.offset, inv.writer_id = "ok", body["offset"], body["writer_id"]
                else:
                    inv.outcome, inv.error = "fail", body.get("error", "")
            except (httpx.HTTPError, ValueError) as e:
                inv.outcome, inv.error = "info", type(e).__name__
            inv.t_complete = time.monotonic()
            i += 1
            time.sleep(self.interval_s)
        client.close()


def read_topic(
    kafka: str, topic: str, end_offset: int, timeout_s: float = 30.0
) -> list[tuple[int, Entry]]:
    from replog.kafka import KafkaLogReader

    reader = KafkaLogReader(kafka, topic, 0)
    out: list[tuple[int, Entry]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while (not out or out[-1][0] < end_offset) and time.monotonic() < deadline:
            out += [(o, Entry.decode(b, o)) for o, b in reader.poll(0.5, 10_000)]
    finally:
        reader.close()
    return out


@dataclass
class Verdict:
    problems: list[str]
    acked: int
    failed: int
    unknown: int
    late_fenced_entries: int
    log_entries: int
    writers: list[tuple[int, int]]  # (writer_id, offset of its first entry), in log order

    def first_offset_by_writer_above(self, writer_id: int) -> int | None:
        return next((o for w, o in self.writers if w > writer_id), None)


def check_run(procs: NodeProcesses, load: Load) -> Verdict:
    """Converge, read the whole topic, and judge the history with the checkers."""
    end = procs.wait_converged()
    log = read_topic(procs.kafka, procs.topic, end)
    accepted = checker.accepted_entries(log)
    acks = [
        checker.Ack(i.id, i.offset, i.writer_id, ops.KIND, i.payload)
        for i in load.history
        if i.outcome == "ok"
    ]
    problems = checker.check_acked(acks, accepted)
    if not log or log[-1][0] != end:
        problems.append(f"read the topic up to {log[-1][0] if log else None}, nodes are at {end}")
    digests = {}
    dumps = {}
    for name in procs.procs:
        applied = [tuple(x) for x in procs.get(name, "/applied")]
        start = applied[0][0] if applied else 0
        problems += checker.check_applied(name, applied, accepted, start, end)  # type: ignore[arg-type]
        digests[name] = {int(k): v for k, v in procs.get(name, "/digests").items()}
        dumps[name] = procs.get(name, "/dump")["rows"]
    problems += checker.check_digests(digests)
    first = next(iter(dumps.values()))
    problems += [f"{n}: final table differs" for n, rows in dumps.items() if rows != first]
    table = {k: v for k, v in first}
    for inv in load.history:
        if inv.outcome == "ok" and table.get(inv.key) != inv.value:
            problems.append(f"{inv.id}: acknowledged, but {inv.key} = {table.get(inv.key)}")
    top, late = -1, 0
    writers: list[tuple[int, int]] = []
    for offset, e in log:
        late += e.writer_id < top
        if e.writer_id > top:
            writers.append((e.writer_id, offset))
        top = max(top, e.writer_id)
    count = {o: sum(1 for i in load.history if i.outcome == o) for o in ("ok", "fail", "info")}
    return Verdict(problems, count["ok"], count["fail"], count["info"], late, len(log), writers)


def failover_s(load: Load, t_fault: float, old_writer: int) -> float | None:
    """From the fault to the first acknowledgement by a newer writer."""
    times = [
        i.t_complete
        for i in load.history
        if i.outcome == "ok" and i.writer_id > old_writer and i.t_complete > t_fault
    ]
    return min(times) - t_fault if times else None
