"""The load generator's own CPU per request (``bench/loadgen``) against a cheap local server.

Issue 12 requires the generator of ``bench/api_w3.py`` to cost under 5 % of a core at
2,000 orders/s, i.e. at most 25 µs of CPU (user + system) per request. This drives
``bench/loadgen`` against ``bench/http_sink.py`` (a canned answer, a few µs per request) at
each rate and reports what the generator says it took (``getrusage``): µs per request, user
and system apart, and how late its requests left (``send_late_p99_us``, part of every latency
it measures). Given several builds (``--binary PATH[:TICK_US]``, e.g. a copy of the binary
before a change), it runs them interleaved A B … B A at each rate, the only comparison that
means anything on a busy machine. Loopback TCP charges part of the server's receive work to
the sender's system time, so the figure includes some of the sink's cost.

Usage: ``python bench/loadgen_cost.py [--rates 500,1000,2000] [--duration-s 8]
[--binary PATH[:TICK_US] ...]`` (default: the ``make loadgen`` build; without ``:TICK_US``
a build runs with its own default tick).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOADGEN = ROOT / "bench" / "loadgen" / "target" / "release" / "railflow-loadgen"
CPU_US_PER_REQUEST_MAX = 25.0  # 5 % of a core at 2,000/s
CONNECTIONS = 48  # as bench/api_w3.py


def start_sink(*args: str) -> tuple[subprocess.Popen, int]:
    """``bench/http_sink.py`` in its own process, and the port it listens on."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "http_sink.py"), *args],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())  # type: ignore[union-attr]


def bodies_file(n: int = 2000) -> str:
    """Order-like bodies, one a line, each with its ``@ID@``."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(n):
            data = {"card": f"c{i % 97}", "amount": 100 + i, "merchant": f"m{i % 13}",
                    "country": "FR", "email": f"buyer{i}@example.com"}
            f.write('{"event_id":"lc-@ID@","type":"order","data":' + json.dumps(data) + "}\n")
    return f.name


def run(binary: str, port: int, rate: float, duration_s: float, bodies: str,
        tick_us: int | None = None, warmup_s: float = 1.0, connections: int = CONNECTIONS,
        timeout_s: float | None = None) -> dict[str, Any]:
    """One load; the generator's JSON result, with ``wait4_cpu_us_per_request``: its CPU as
    the kernel gave it to this parent (also for a build that does not report its own)."""
    cmd = [binary, "--target", f"127.0.0.1:{port}", "--path", "/v1/events", "--key", "k",
           "--rate", str(rate), "--duration-s", str(duration_s), "--warmup-s", str(warmup_s),
           "--connections", str(connections), "--bodies", bodies, "--tag", "lc"]
    if tick_us is not None:  # otherwise the build's own default
        cmd += ["--tick-us", str(tick_us)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    killer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
    if killer is not None:
        killer.start()
    out = proc.stdout.read()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so that its rusage is ours
    proc.returncode = status
    if killer is not None:
        killer.cancel()
    if status != 0:
        raise RuntimeError(f"loadgen failed or timed out (wait status {status})")
    result = json.loads(out)
    result["wait4_cpu_us_per_request"] = round(
        (usage.ru_utime + usage.ru_stime) * 1e6 / result["sent"], 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--binary", action="append",
                        help="a loadgen build, PATH or PATH:TICK_US (repeatable)")
    args = parser.parse_args(argv)
    if not args.binary:
        subprocess.run(["make", "-s", "loadgen"], cwd=ROOT, check=True)
    builds = [(b.rpartition(":")[0], int(b.rpartition(":")[2])) if ":" in b else (b, None)
              for b in (args.binary or [str(LOADGEN)])]
    sink, port = start_sink()
    bodies = bodies_file()
    rows = []
    try:
        for rate in (float(r) for r in args.rates.split(",")):
            for binary, tick in builds + builds[::-1]:
                r = run(binary, port, rate, args.duration_s, bodies, tick)
                row = {"rate": rate, "binary": binary, "tick_us": r.get("tick_us", tick),
                       "cpu_us_per_request": r["wait4_cpu_us_per_request"],
                       "reported_cpu_us_per_request": r.get("cpu_us_per_request"),
                       "sys_us": (round(r["cpu_sys_s"] * 1e6 / r["sent"], 1)
                                  if "cpu_sys_s" in r else None),
                       "send_late_p50_us": r.get("send_late_p50_us"),
                       "send_late_p99_us": r.get("send_late_p99_us"), "p99_us": r["p99_us"],
                       "wakeups": r.get("wakeups"),
                       "errors": r["errors"],
                       "loadgen_cpu_ok": r["wait4_cpu_us_per_request"] <= CPU_US_PER_REQUEST_MAX}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        sink.terminate()
        sink.wait()
        os.unlink(bodies)
    print(f"load average {os.getloadavg()[0]:.1f} (NOISY unless the machine is quiet)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
