"""Start, find and stop server processes by their own PID, never by name.

Each process has a PID file ``<run>/pids/<name>.pid`` holding ``pid start_ticks``; the start
time (from ``/proc/<pid>/stat``) guards against a recycled PID being mistaken for ours.
Callers must hold the cluster lock while starting or stopping.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

from infra import paths
from infra.errors import InfraError

STOP_POLL_S = 0.2
LOG_TAIL_BYTES = 4000


def _pid_file(name: str) -> Path:
    return paths.PID_DIR / f"{name}.pid"


def _start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks since boot, or None if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # fields after "(comm)"; comm may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def start(name: str, argv: list[str], env: dict[str, str] | None = None,
          cwd: Path | None = None, nice: int = 0) -> int:
    """Launch ``argv`` detached (own session), output appended to the process's log file;
    ``nice`` is added to its nice level (``nice(1)`` execs it: the PID is the server's)."""
    paths.ensure_dirs()
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    log = paths.log_file(name)
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
        out.write((" ".join(argv) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    ticks = _start_ticks(proc.pid)
    _pid_file(name).write_text(f"{proc.pid} {ticks}\n")
    return proc.pid


def pid_of(name: str) -> int | None:
    """The PID of our running process ``name``, or None (stale PID files are removed)."""
    f = _pid_file(name)
    try:
        pid_s, ticks_s = f.read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    pid = int(pid_s)
    ticks = _start_ticks(pid)
    if ticks is None or ticks_s == "None" or ticks != int(ticks_s):
        f.unlink(missing_ok=True)
        return None
    return pid


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def stop(name: str, grace_s: float) -> bool:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL. Returns True if something was stopped."""
    pid = pid_of(name)
    if pid is None:
        return False
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if _start_ticks(pid) is None:
            break
        _reap(pid)
        time.sleep(STOP_POLL_S)
    else:
        _signal(pid, signal.SIGKILL)
        for _ in range(50):
            if _start_ticks(pid) is None:
                break
            _reap(pid)
            time.sleep(STOP_POLL_S)
        else:
            raise InfraError(f"{name} (pid {pid}) survived SIGKILL")
    _reap(pid)
    _pid_file(name).unlink(missing_ok=True)
    return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child (started in this Python)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def log_tail(name: str, max_bytes: int = LOG_TAIL_BYTES) -> str:
    log = paths.log_file(name)
    if not log.exists():
        return "(no log)"
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - max_bytes))
        return f.read().decode(errors="replace")
