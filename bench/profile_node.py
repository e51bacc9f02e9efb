"""Where an embedded node's CPU per order goes: py-spy samples every thread of a node under load.

Starts an embedded node as ``bench/api_cost.py`` does (file log, RocksDB run store, the
default server with the hot path), warms it up, then drives ``--orders`` W3 orders at
``--rate`` per second with ``bench/api_w3.py``'s load generator while ``py-spy record`` samples
the server process (``--threads --idle --native``: all threads, idle frames kept so that a
thread's waits are visible; they are left out of the table). Prints, per thread, the share of
the samples that were on CPU and the top leaf functions, and the node's CPU µs per order over
the same orders (noisy on a shared machine: read the proportions).

Needs py-spy (the ``dev`` extra) and ptrace rights over the node (root, or
``kernel.yama.ptrace_scope=0``).

Usage: ``.venv/bin/python bench/profile_node.py [--orders 6000] [--rate 500] [--raw out.txt]``
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.api_cost import _start_embedded, _stop, cpu_s  # noqa: E402
from bench.api_w3 import run_load  # noqa: E402

# A sample with one of these frames on its stack is a thread waiting, not working (py-spy's
# own idle test does not see through native frames).
WAIT_FRAMES = ("lock_PyThread_acquire_lock", "time_sleep", "select_epoll_poll", "uv__io_poll",
               "epoll_wait", "pthread_cond_timedwait", "pthread_cond_wait", "Condition.wait",
               "sem_wait", "sem_timedwait", "WaitForMultipleObjects", "__GI___poll",
               "std::condition_variable::wait")


def _py_spy() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    found = str(exe) if exe.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -e '.[dev]'")
    return found


def summarize(raw: Path, top: int) -> str:
    """Per thread: the share of busy samples, the busiest Python functions (the innermost
    Python frame of each sample) and the busiest frames including what they call."""
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    busy: collections.Counter = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        thread = re.sub(r"^thread \(\d+\): ", "", frames[0]) or "?"
        if any(w in f for f in frames for w in WAIT_FRAMES):
            continue
        busy[thread] += n
        python = [f for f in frames[1:] if ".py:" in f]
        leaf = python[-1] if python else frames[-1]
        native = frames[-1] if ".py:" not in frames[-1] else ""
        own[thread][leaf + (f"  [{native}]" if native and python else "")] += n
        for f in set(frames[1:]):
            if ".py:" in f:
                inclusive[thread][f] += n
    all_busy = sum(busy.values()) or 1
    out = [f"busy samples: {all_busy} (thread names merged)"]
    for thread, n in busy.most_common():
        out.append(f"\n== {thread}: {100 * n / all_busy:.1f}% of busy samples")
        out.append("  innermost Python frame [native leaf]:")
        for leaf, c in own[thread].most_common(top):
            out.append(f"    {100 * c / all_busy:5.1f}%  {leaf[:160]}")
        out.append("  Python frames, inclusive:")
        for f, c in inclusive[thread].most_common(top * 2):
            out.append(f"    {100 * c / all_busy:5.1f}%  {f[:160]}")
    return "\n".join(out)


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user, system) of each thread of ``pid``."""
    return {t.id: (t.user_time, t.system_time) for t in psutil.Process(pid).threads()}


def _thread_names(raw: Path) -> dict[int, str]:
    """Thread id -> Python thread name, from py-spy's raw lines ("thread (tid): name;...")."""
    out = {}
    for line in raw.read_text().splitlines():
        m = re.match(r"thread \((\d+)\): ([^;]*)", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=6_000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--sample-rate", type=int, default=200)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--raw", type=Path, default=Path("prof.txt"))
    parser.add_argument("--no-native", action="store_true",
                        help="Python frames only, sampled without stopping the node (py-spy "
                             "decides what is idle)")
    args = parser.parse_args(argv)
    spy = _py_spy()
    proc, url, key, data_dir = _start_embedded("uvicorn", True)
    try:
        run_load([url], "/v1/events", key, args.rate, 1_000 / args.rate, 0.0, 1)
        time.sleep(1.0)
        duration_s = args.orders / args.rate
        cmd = [spy, "record", "--idle", "--threads", "-r", str(args.sample_rate), "-p",
               str(proc.pid), "-o", str(args.raw), "--format", "raw", "-d",
               str(int(duration_s) + 1), "--nonblocking"]
        if args.no_native:  # no native frames to tell a wait by: py-spy's own idle test
            cmd.remove("--idle")
        else:
            cmd.remove("--nonblocking")
            cmd.append("--native")
        spy_proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        before, threads_before = cpu_s(proc.pid), _thread_cpu(proc.pid)
        load = run_load([url], "/v1/events", key, args.rate, duration_s, 0.0, 2)
        used, threads_after = cpu_s(proc.pid) - before, _thread_cpu(proc.pid)
        spy_proc.wait()
        ok = args.orders - sum(load["errors"].values())
        print(f"node CPU per order while sampled: {used * 1e6 / max(ok, 1):.0f} µs "
              f"(sampling adds its own cost; noisy), errors {load['errors']}")
    finally:
        _stop(proc)
    names = _thread_names(args.raw)
    print("CPU µs per order by thread, user + system (the kernel's per-thread times, 10 ms "
          "ticks):")
    per_thread = {tid: (t[0] - threads_before.get(tid, (0.0, 0.0))[0],
                        t[1] - threads_before.get(tid, (0.0, 0.0))[1])
                  for tid, t in threads_after.items()}
    other = [0.0, 0.0]
    for tid, (user, system) in sorted(per_thread.items(), key=lambda kv: -sum(kv[1])):
        if tid not in names:  # not in the samples (native threads): summed below
            other[0], other[1] = other[0] + user, other[1] + system
        elif user + system > 0:
            print(f"  {(user + system) * 1e6 / max(ok, 1):7.1f} = {user * 1e6 / max(ok, 1):6.1f}"
                  f" + {system * 1e6 / max(ok, 1):6.1f}  {names[tid]}")
    print(f"  {sum(other) * 1e6 / max(ok, 1):7.1f} = {other[0] * 1e6 / max(ok, 1):6.1f}"
          f" + {other[1] * 1e6 / max(ok, 1):6.1f}  threads py-spy did not name (native)")
    print(summarize(args.raw, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
