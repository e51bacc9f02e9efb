"""Bring the whole local cluster up, down, or report on it.

``up()`` keeps servers that already run (after a probe), starts the rest all at once and waits
until each answers a real round trip; it returns what it did so a caller (the test fixture)
can later stop only what it started with ``down(names)``. A file lock serialises ``up`` and
``down`` across processes, since every clone on the machine shares one cluster.
"""

import fcntl
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from infra import jars, paths, procs
from infra.errors import InfraError
from infra.hbase import HBase
from infra.hdfs import Hdfs
from infra.kafka import Kafka
from infra.seaweedfs import SeaweedFS
from infra.server import Server, port_open, wait_ready
from infra.zookeeper import ZooKeeper

SERVERS: tuple[Server, ...] = (ZooKeeper(), Kafka(), Hdfs(), HBase(), SeaweedFS())
JAR_PROFILES = jars.PROFILES
LOCK_TIMEOUT_S = 900
HEALTH_TIMEOUT_S = 20


@dataclass
class Report:
    name: str
    action: str  # "kept" | "started" | "stopped" | "failed"
    seconds: float = 0.0
    error: str = ""
    pids: dict[str, int] = field(default_factory=dict)


@contextmanager
def _lock():
    paths.ensure_dirs()
    with open(paths.LOCK_FILE, "w") as f:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InfraError(f"another `infra up/down` holds {paths.LOCK_FILE}") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def select(names: list[str] | None) -> list[Server]:
    if not names:
        return list(SERVERS)
    known = {s.name: s for s in SERVERS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InfraError(f"unknown server(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]


def fetch_jars() -> dict[str, float]:
    """Resolve every jar profile (Maven only on a cold cache); seconds spent per profile."""
    return {p: jars.ensure(p)[1] for p in JAR_PROFILES}


def up(names: list[str] | None = None, log=print) -> list[Report]:
    servers = select(names)
    with _lock():
        for profile, secs in fetch_jars().items():
            if secs:
                log(f"  jars {profile}: fetched in {secs:.1f} s")
        plans: list[tuple[Server, str, float]] = []
        for server in servers:
            pids = [procs.pid_of(p.name) for p in server.processes]
            if all(pids):
                plans.append((server, "kept", time.monotonic()))
                continue
            for proc in server.processes:  # half-running: restart it whole
                procs.stop(proc.name, proc.stop_grace_s)
            busy = [port for port in server.ports() if port_open(port)]
            if busy:
                raise InfraError(f"{server.name}: port(s) {busy} already in use by a process "
                                 "this cluster did not start")
            started = time.monotonic()
            server.prepare()
            for proc in server.processes:
                procs.start(proc.name, server.argv(proc), env=server.env(proc), nice=proc.nice)
            plans.append((server, "started", started))

        def ready(plan: tuple[Server, str, float]) -> Report:
            server, action, started = plan
            timeout = HEALTH_TIMEOUT_S if action == "kept" else server.start_timeout_s
            try:
                wait_ready(server, timeout)
            except InfraError as exc:
                if action == "started":
                    for proc in server.processes:
                        procs.stop(proc.name, proc.stop_grace_s)
                return Report(server.name, "failed", time.monotonic() - started, str(exc))
            pids = {p.name: procs.pid_of(p.name) or 0 for p in server.processes}
            return Report(server.name, action, time.monotonic() - started, pids=pids)

        with ThreadPoolExecutor(max_workers=len(plans) or 1) as pool:
            reports = list(pool.map(ready, plans))
    for r in reports:
        if r.action == "failed":
            log(f"  {r.name}: FAILED after {r.seconds:.1f} s\n{r.error}")
        else:
            log(f"  {r.name}: {r.action}, ready in {r.seconds:.1f} s")
    return reports


def down(names: list[str] | None = None, log=print) -> list[Report]:
    servers = select(names)
    with _lock():
        def stop(server: Server) -> Report:
            started = time.monotonic()
            stopped = False
            for proc in reversed(server.processes):
                stopped = procs.stop(proc.name, proc.stop_grace_s) or stopped
            return Report(server.name, "stopped" if stopped else "absent",
                          time.monotonic() - started)

        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            reports = list(pool.map(stop, servers))
    for r in reports:
        log(f"  {r.name}: {r.action}" + (f" in {r.seconds:.1f} s" if r.action == "stopped" else ""))
    return reports


@dataclass
class ProcessStatus:
    server: str
    process: str
    pid: int | None
    ports: tuple[int, ...]
    rss_bytes: int
    healthy: bool | None  # None: not probed (process down)


def status(probe: bool = True) -> list[ProcessStatus]:
    rows: list[ProcessStatus] = []
    for server in SERVERS:
        pids = {p.name: procs.pid_of(p.name) for p in server.processes}
        healthy: bool | None = None
        if probe and all(pids.values()):
            try:
                server.probe()
                healthy = True
            except Exception:
                healthy = False
        for p in server.processes:
            pid = pids[p.name]
            rows.append(ProcessStatus(server.name, p.name, pid, p.ports,
                                      procs.rss_bytes(pid) if pid else 0,
                                      healthy if pid else None))
    return rows


def is_up() -> bool:
    """True when every server runs and answers a round trip."""
    return all(r.healthy for r in status(probe=True))
