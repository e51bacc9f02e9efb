"""Where the machine's CPU went during a benchmark row, second by second, beside the leader's
log round trips of the same seconds.

``bench/api_w3.py`` runs a ``Census`` over each row: every ``interval_s`` it reads, from the
kernel alone, the machine's busy cores (``/proc/stat``), each watched process's CPU (the three
nodes, the cluster's servers from infra/'s PID files, the load generator) and, for every
thread of each node, its CPU and the time it waited runnable for a core (``schedstat``'s
run-queue delay); and it takes the leader's round-trip histogram of that second (the endpoint
starts a new one at each call, so the row's whole histogram is their sum). Python thread names
come from each node's ``/internal/v1/threads``; a thread without one (librdkafka's, DuckDB's)
goes by its kernel name with digits dropped.

The summary sets the seconds whose slowest round trip passed ``slow_ms`` (P1's p99.9, 25 ms)
beside the others: if those seconds had the busier machine or a thread waiting longer for a
core, the tail is the machine's CPU; if not, it is inside a node (the GIL, a lock, a pause).
A waiting-for-a-core figure is exact (the scheduler's own clock); a GIL wait shows nowhere
here (a thread waiting for the GIL sleeps). The JVM servers' collector pauses come from their
GC logs (infra/'s ``<logs>/<main class>-gc.log``), per server over the row and within the slow
seconds.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

CLK_TCK = os.sysconf("SC_CLK_TCK")
slow_ms_default = 25.0
# "[2026-11-24T16:24:04.231+0000][12.345s] GC(3) Pause Young (Normal) (...) 24M->5M(256M) 3.456ms"
_GC_PAUSE = re.compile(r"^\[([^\]]+)\]\[[^\]]+\] GC\(\d+\) (Pause \w+).* ([\d.]+)ms$")
# "[...][12.345s] GC(3) User=0.02s Sys=0.00s Real=0.14s" (infra/java.py logs gc+cpu)
_GC_CPU = re.compile(r"^\[([^\]]+)\]\[[^\]]+\] GC\(\d+\) User=([\d.]+)s Sys=([\d.]+)s "
                     r"Real=([\d.]+)s$")


def _gc_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def gc_pauses(log: Path, since: float, until: float) -> list[tuple[float, float, str]]:
    """(wall-clock end, ms, kind) of each collector pause a JVM's GC log holds in a window."""
    out = []
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        m = _GC_PAUSE.match(line)
        if not m:
            continue
        at = _gc_time(m.group(1))
        if since <= at <= until:
            out.append((at, float(m.group(3)), m.group(2).strip()))
    return out


def gc_cpu_ms(log: Path, since: float, until: float) -> tuple[float, float]:
    """(CPU ms, wall ms) of a JVM's collections in a window, from its ``gc+cpu`` lines: the
    process's user + system time over each pause against the pause's wall time. A pause far
    longer than its CPU waited for a core (the collector's threads were runnable, not run)."""
    cpu = real = 0.0
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return cpu, real
    for line in lines:
        m = _GC_CPU.match(line)
        if m and since <= _gc_time(m.group(1)) <= until:
            cpu += (float(m.group(2)) + float(m.group(3))) * 1000
            real += float(m.group(4)) * 1000
    return round(cpu, 1), round(real, 1)


def busy_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot (busy: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def process_ticks(pid: int) -> int | None:
    """User + system clock ticks of a process (all its threads), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def thread_schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (ns on a CPU, ns waiting runnable for one)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = f.read().split()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run_ns), int(wait_ns))
    return out


def kernel_thread_name(pid: int, tid: int) -> str:
    """The kernel's name of a thread, digits dropped so that the same kind of thread of every
    pool sums under one name (librdkafka names its own: ``rdk:broker1`` -> ``rdk:broker*``)."""
    try:
        name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:  # gone
        name = "?"
    return "native " + re.sub(r"\d+", "*", name)


def python_thread_name(name: str) -> str:
    """A Python thread's name without the node id or pool index it carries, so the same
    thread of every node and every pool worker sum under one name."""
    name = re.sub(r"-node-\d+$", "", name)      # replog-loop-node-1
    return re.sub(r"_\d+$", "", name)           # checkpointer_0


class Census:
    """Samples the machine while a row runs: ``start()``, the row, ``stop()`` -> summary.

    ``processes``: name -> pid of every process to account for. ``nodes``: name -> (pid, a
    callable returning that node's ``{tid: python name}``). ``round_trip``: a callable that
    returns the leader's round-trip histogram since its last call (and starts a new one), its
    cyclic collector's runs over the same time
    (``[[generation, wall ms, CPU ms, objects freed], ...]``) and how late its ``gil-watch``
    thread got to run Python (a histogram of µs, None when the node does not watch).
    ``gc_logs``: server name -> its JVM's GC log."""

    def __init__(self, processes: dict[str, int], nodes: dict[str, tuple[int, Callable]],
                 round_trip: Callable[[], tuple[HdrHistogram, list, HdrHistogram | None]]
                 | None = None,
                 interval_s: float = 1.0, slow_ms: float = slow_ms_default,
                 gc_logs: dict[str, Path] | None = None) -> None:
        self.processes, self.nodes, self.round_trip = processes, nodes, round_trip
        self.gc_logs = gc_logs or {}
        self.interval_s, self.slow_ms = interval_s, slow_ms
        self.seconds: list[dict[str, Any]] = []
        self.round_trips = HdrHistogram(1, 60_000_000, 3)
        self.gil_waits = HdrHistogram(1, 60_000_000, 3)
        self.round_trip_failures = 0
        self._names: dict[str, dict[int, str]] = {n: {} for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="census", daemon=True)

    def start(self) -> None:
        self._refresh_names()
        if self.round_trip is not None:
            self.round_trip()  # the row starts here
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return self.summary()

    # ------------------------------------------------------------ sampling
    def _refresh_names(self) -> None:
        for node, (_, names) in self.nodes.items():
            try:
                self._names[node] = {tid: python_thread_name(n) for tid, n in names().items()}
            except Exception:  # a node that does not answer keeps its last names
                pass

    def _thread_name(self, node: str, pid: int, tid: int) -> str:
        return self._names[node].get(tid) or kernel_thread_name(pid, tid)

    def _snapshot(self) -> dict[str, Any]:
        return {"t": time.monotonic(), "wall": time.time(), "busy": busy_ticks(),
                "procs": {n: process_ticks(p) for n, p in self.processes.items()},
                "threads": {n: thread_schedstat(pid) for n, (pid, _) in self.nodes.items()}}

    def _run(self) -> None:
        prev = self._snapshot()
        last_names = time.monotonic()
        while not self._stop.wait(self.interval_s):
            cur = self._snapshot()
            rt = None
            if self.round_trip is not None:
                try:
                    rt = self.round_trip()
                except Exception:  # a second the leader did not answer: its samples move on
                    self.round_trip_failures += 1
            self.seconds.append(self._second(prev, cur, rt))
            prev = cur
            if cur["t"] - last_names > 5.0:  # pool workers come and go
                self._refresh_names()
                last_names = cur["t"]

    def _second(self, prev: dict, cur: dict,
                rt: tuple[HdrHistogram, list, HdrHistogram | None] | None) -> dict[str, Any]:
        wall = cur["t"] - prev["t"]
        busy = (cur["busy"][0] - prev["busy"][0]) / CLK_TCK / wall
        procs = {}
        for name, ticks in cur["procs"].items():
            before = prev["procs"].get(name)
            if ticks is not None and before is not None:
                procs[name] = (ticks - before) / CLK_TCK / wall
        threads: dict[str, dict[str, list[float]]] = {}
        for node, stats in cur["threads"].items():
            pid = self.nodes[node][0]
            per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
            for tid, (run_ns, wait_ns) in stats.items():
                run0, wait0 = prev["threads"][node].get(tid, (0, 0))
                name = self._thread_name(node, pid, tid)
                per[name][0] += (run_ns - run0) / 1e6 / wall      # ms on a CPU per second
                per[name][1] += (wait_ns - wait0) / 1e6 / wall    # ms waiting for one
            threads[node] = dict(per)
        second: dict[str, Any] = {"wall": [prev["wall"], cur["wall"]], "busy_cores": busy,
                                  "procs": procs, "threads": threads}
        if rt is not None:
            hist, collections, gil = rt
            self.round_trips.add(hist)
            if gil is not None and gil.get_total_count():
                self.gil_waits.add(gil)
                second["gil_wait_p99_ms"] = gil.get_value_at_percentile(99) / 1000
                second["gil_wait_max_ms"] = gil.get_max_value() / 1000
            second["rt_count"] = hist.get_total_count()
            second["rt_p99_ms"] = hist.get_value_at_percentile(99) / 1000
            second["rt_max_ms"] = hist.get_max_value() / 1000
            second["leader_collections"] = collections
        return second

    # ------------------------------------------------------------ summary
    def summary(self) -> dict[str, Any]:
        secs = self.seconds
        if not secs:
            return {"seconds": 0}
        slow = [s for s in secs if s.get("rt_max_ms", 0) > self.slow_ms]
        rest = [s for s in secs if s.get("rt_max_ms", 0) <= self.slow_ms]
        busy = [s["busy_cores"] for s in secs]
        out: dict[str, Any] = {
            "seconds": len(secs), "cores": os.cpu_count(),
            "busy_cores": {"mean": _r(statistics.fmean(busy)), "p90": _r(_pct(busy, 90)),
                           "max": _r(max(busy))},
            "process_cores": {n: _r(_mean(secs, lambda s, n=n: s["procs"].get(n)))
                              for n in self.processes},
            "threads": self._thread_table(secs),
            "slow_ms": self.slow_ms, "slow_seconds": len(slow),
            "round_trip_failures": self.round_trip_failures,
        }
        if self.gc_logs:
            out["gc_pauses"] = self._gc_summary(secs, slow)
        if self.gil_waits.get_total_count():
            g = self.gil_waits
            out["leader_gil_wait_ms"] = {
                "samples": g.get_total_count(), "p50": g.get_value_at_percentile(50) / 1000,
                "p99": g.get_value_at_percentile(99) / 1000,
                "p999": g.get_value_at_percentile(99.9) / 1000, "max": g.get_max_value() / 1000,
                "max_per_second_slow_vs_rest": [
                    _r(_mean(slow, lambda s: s.get("gil_wait_max_ms"))),
                    _r(_mean(rest, lambda s: s.get("gil_wait_max_ms")))]}
        if self.round_trip is not None:
            out["leader_collections"] = {
                "all": _collector_runs(secs), "in_slow_seconds": _collector_runs(slow)}
        if self.round_trip is not None and slow and rest:
            out["slow_vs_rest"] = {
                "busy_cores": [_r(_mean(slow, lambda s: s["busy_cores"])),
                               _r(_mean(rest, lambda s: s["busy_cores"]))],
                "process_cores": {n: [_r(_mean(slow, lambda s, n=n: s["procs"].get(n))),
                                      _r(_mean(rest, lambda s, n=n: s["procs"].get(n)))]
                                  for n in self.processes},
                "thread_wait_ms_per_s": self._wait_slow_vs_rest(slow, rest),
            }
        return out

    def _gc_summary(self, secs: list[dict], slow: list[dict]) -> dict[str, Any]:
        """Per JVM: pauses over the row (count, total ms, max ms) and those in slow seconds."""
        since, until = secs[0]["wall"][0], secs[-1]["wall"][1]
        out = {}
        for name, log in self.gc_logs.items():
            pauses = gc_pauses(log, since, until)
            in_slow = [ms for at, ms, _ in pauses
                       if any(s["wall"][0] <= at <= s["wall"][1] for s in slow)]
            cpu_ms, cpu_wall_ms = gc_cpu_ms(log, since, until)
            out[name] = {"count": len(pauses), "total_ms": _r(sum(p[1] for p in pauses)),
                         "cpu_ms": cpu_ms, "cpu_wall_ms": cpu_wall_ms,
                         "max_ms": _r(max((p[1] for p in pauses), default=0.0)),
                         "in_slow_seconds": len(in_slow),
                         "in_slow_total_ms": _r(sum(in_slow))}
        return out

    def _thread_table(self, secs: list[dict]) -> dict[str, dict[str, list[float]]]:
        """Per node, per thread name: [CPU ms per s, run-queue wait ms per s], over the row;
        threads under 1 ms of CPU per second left out."""
        out: dict[str, dict[str, list[float]]] = {}
        for node in self.nodes:
            acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
            for s in secs:
                for name, (run, wait) in s["threads"].get(node, {}).items():
                    acc[name][0] += run / len(secs)
                    acc[name][1] += wait / len(secs)
            out[node] = {n: [_r(r), _r(w)] for n, (r, w) in
                         sorted(acc.items(), key=lambda kv: -kv[1][0]) if r >= 1.0}
        return out

    def _wait_slow_vs_rest(self, slow: list[dict], rest: list[dict]) -> dict[str, Any]:
        """Per node's busiest threads: run-queue wait ms per s in slow seconds and in the rest."""
        table = self._thread_table(slow + rest)
        out: dict[str, Any] = {}
        for node, threads in table.items():
            out[node] = {name: [_r(_mean(secs, _thread_wait(node, name))) for secs in (slow, rest)]
                         for name in list(threads)[:6]}
        return out


def format_summary(c: dict[str, Any]) -> str:
    """A few lines for the console: busy cores, who used them, the slow seconds."""
    if not c.get("seconds"):
        return "  census: no sample"
    lines = [f"  census over {c['seconds']} s: busy cores mean {c['busy_cores']['mean']} / "
             f"p90 {c['busy_cores']['p90']} / max {c['busy_cores']['max']} of {c['cores']}; "
             "cores by process: " + ", ".join(f"{n} {v}" for n, v in
                                              sorted(c["process_cores"].items(),
                                                     key=lambda kv: -(kv[1] or 0)))]
    for node, threads in c["threads"].items():
        top = list(threads.items())[:6]
        lines.append(f"    {node} threads (CPU / run-queue wait, ms per s): " + ", ".join(
            f"{n} {r}/{w}" for n, (r, w) in top))
    if "slow_vs_rest" in c:
        sv = c["slow_vs_rest"]
        lines.append(f"  {c['slow_seconds']} s with a round trip over {c['slow_ms']} ms: busy "
                     f"cores {sv['busy_cores'][0]} against {sv['busy_cores'][1]} in the rest")
        moved = sorted(sv["process_cores"].items(),
                       key=lambda kv: -abs((kv[1][0] or 0) - (kv[1][1] or 0)))[:4]
        lines.append("    cores slow/rest: " + ", ".join(f"{n} {a}/{b}" for n, (a, b) in moved))
        for node, threads in sv["thread_wait_ms_per_s"].items():
            lines.append(f"    {node} run-queue wait slow/rest (ms per s): " + ", ".join(
                f"{n} {a}/{b}" for n, (a, b) in threads.items()))
    if c.get("leader_collections"):
        lc = c["leader_collections"]
        lines.append("  leader's cyclic collector by generation (runs, total / max wall ms, "
                     "total CPU ms, objects freed): " + ", ".join(
                         f"gen {g} {r}/{t}/{m}/{c}/{n}"
                         for g, (r, t, m, c, n) in lc["all"].items()) +
                     "; in slow seconds: " + (", ".join(
                         f"gen {g} {r}/{t}/{m}/{c}/{n}"
                         for g, (r, t, m, c, n) in lc["in_slow_seconds"].items()) or "none"))
    if c.get("leader_gil_wait_ms"):
        g = c["leader_gil_wait_ms"]
        lines.append(f"  leader's wait to run Python (gil-watch, {g['samples']} samples): p50 "
                     f"{g['p50']} / p99 {g['p99']} / p99.9 {g['p999']} / max {g['max']} ms; "
                     "a second's max, slow/rest seconds: "
                     f"{g['max_per_second_slow_vs_rest'][0]}/{g['max_per_second_slow_vs_rest'][1]}"
                     " ms")
    if c.get("gc_pauses"):
        lines.append("  JVM pauses (count, total ms, max ms, CPU ms; in slow seconds: count, ms): "
                     + ", ".join(f"{n} {g['count']}/{g['total_ms']}/{g['max_ms']}/"
                                 f"{g.get('cpu_ms', 0)}; "
                                 f"{g['in_slow_seconds']}/{g['in_slow_total_ms']}"
                               for n, g in c["gc_pauses"].items() if g["count"]))
    return "\n".join(lines)


def _collector_runs(secs: list[dict]) -> dict[str, list[float]]:
    """Per generation: [runs, total wall ms, max wall ms, total CPU ms, objects freed] of the
    leader's cyclic collector."""
    out: dict[str, list[float]] = {}
    for s in secs:
        for gen, wall, cpu, freed in s.get("leader_collections", []):
            runs = out.setdefault(str(gen), [0, 0.0, 0.0, 0.0, 0])
            runs[0] += 1
            runs[1] = round(runs[1] + wall, 3)
            runs[2] = max(runs[2], wall)
            runs[3] = round(runs[3] + cpu, 3)
            runs[4] += freed
    return out


def _thread_wait(node: str, name: str) -> Callable[[dict], float]:
    return lambda s: s["threads"].get(node, {}).get(name, [0.0, 0.0])[1]


def _mean(secs: list[dict], value: Callable[[dict], float | None]) -> float | None:
    vals = [v for v in map(value, secs) if v is not None]
    return statistics.fmean(vals) if vals else None


def _pct(vals: list[float], q: float) -> float:
    ordered = sorted(vals)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
