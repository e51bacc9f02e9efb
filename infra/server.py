"""What every server module provides, and the readiness loop shared by all of them.

A ``Server`` is one service of the cluster (e.g. HDFS) made of one or more OS processes (NameNode,
DataNode). ``prepare()`` writes configs and formats storage, ``argv()`` gives each process's
command, ``probe()`` does one real round trip through the server and raises if it fails.
"""

import os
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from infra import procs
from infra.endpoints import HOST
from infra.errors import InfraError

PROBE_INTERVAL_S = 0.5
PORT_CONNECT_TIMEOUT_S = 0.3
# The servers no decision waits for (the run store, the checkpoint stores) run at this nice
# level: on a machine they share with the nodes, Kafka and ZooKeeper, their bursts (a JVM's
# collection on every core, a checkpoint's upload) yield the cores to the order path and take
# what is left. ``RAILFLOW_INFRA_OFF_PATH_NICE=0`` starts them at normal priority.
OFF_PATH_NICE = int(os.environ.get("RAILFLOW_INFRA_OFF_PATH_NICE", "10"))


@dataclass(frozen=True)
class Process:
    name: str
    ports: tuple[int, ...]
    stop_grace_s: float = 30.0
    nice: int = 0  # added to the process's nice level at its start (``procs.start``)


class Server(ABC):
    name: str
    processes: tuple[Process, ...]
    start_timeout_s: float = 120.0

    @abstractmethod
    def prepare(self) -> None:
        """Fetch jars, write configs, format storage. Idempotent; runs before every start."""

    @abstractmethod
    def argv(self, process: Process) -> list[str]:
        """The command line of one process."""

    def env(self, process: Process) -> dict[str, str]:
        return {}

    @abstractmethod
    def probe(self) -> None:
        """One real round trip (write then read back). Raises on any failure."""

    def ports(self) -> tuple[int, ...]:
        return tuple(p for proc in self.processes for p in proc.ports)


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(PORT_CONNECT_TIMEOUT_S)
        return s.connect_ex((host, port)) == 0


def wait_ready(server: Server, timeout_s: float) -> float:
    """Probe until a round trip succeeds; fail fast if one of the server's processes died."""
    started = time.monotonic()
    deadline = started + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        for proc in server.processes:
            if procs.pid_of(proc.name) is None:
                raise InfraError(f"{proc.name} exited during start-up; last log lines:\n"
                                 f"{procs.log_tail(proc.name)}")
        try:
            server.probe()
            return time.monotonic() - started
        except Exception as exc:  # any client error means "not ready yet"
            last = exc
        time.sleep(PROBE_INTERVAL_S)
    raise InfraError(f"{server.name} not ready after {timeout_s:.0f} s (last probe error: "
                     f"{last!r}); see logs of {[p.name for p in server.processes]}")
