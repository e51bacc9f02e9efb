"""Where a node's CPU per order goes: py-spy samples every thread of a node under load.

Embedded (default): starts a node as ``bench/api_cost.py`` does (file log, RocksDB run store,
the default server with the hot path). ``--cluster``: three nodes on infra/'s Kafka, ZooKeeper,
HBase and S3, started by ``bench/api_cost.py``'s own code, and the leader's process and one
follower's are sampled side by side. Warms up, then drives ``--orders`` W3 orders at ``--rate``
per second at the leader with ``bench/api_w3.py``'s load generator while ``py-spy record``
samples each process (``--threads --idle --native``: all threads, idle frames kept so that a
thread's waits are visible; they are left out of the table). Prints, per node, each thread's
CPU µs per order from the kernel over as many orders before the sampling (a follower's counted
once it applied them all; threads without a Python frame, librdkafka's, by the kernel's thread
name) and, before the orders, each thread's CPU per second over ``--idle-s`` seconds without
any (a node's idle CPU is part of every order's figure: 1 % of a core is 20 µs per order at
500/s), the HTTP thread's busy samples by stage of an order (``HTTP_STAGES``: decode, auth,
submit hand-off, settle wakeup, run views, reply send, uvicorn's own), the share of the samples
that were on CPU and the top frames; the folded stacks stay in
``--raw`` (one file per node with ``--cluster``). Noisy on a shared machine: read the
proportions.

Needs py-spy (the ``dev`` extra) and ptrace rights over the node (root, or
``kernel.yama.ptrace_scope=0``).

``--server native`` profiles nodes behind the native front end (``runner.api.native``): its
runtime's threads (``http-native``, no Python frame) and its Python thread
(``http-native-py``) then take the HTTP thread's place.

Usage: ``.venv/bin/python bench/profile_node.py [--cluster] [--server native] [--orders 6000]
[--rate 500] [--raw out.txt]``
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

from bench.api_cost import (  # noqa: E402
    _start_embedded,
    _stop,
    cpu_s,
    started_cluster,
    wait_caught_up,
)
from bench.api_w3 import run_load  # noqa: E402
from bench.census import kernel_thread_name  # noqa: E402
from runner.settings import Settings  # noqa: E402

# A sample with one of these frames on its stack is a thread waiting, not working (py-spy's
# own idle test does not see through native frames). ``PyThread_acquire_lock_timed``: a Python
# lock's blocking acquire (an uncontended one returns in nanoseconds, sampled about never), as
# a reader waiting on the file log's condition while the appender syncs.
WAIT_FRAMES = ("lock_PyThread_acquire_lock", "PyThread_acquire_lock_timed", "time_sleep",
               "select_epoll_poll", "uv__io_poll",
               "epoll_wait", "pthread_cond_timedwait", "pthread_cond_wait", "Condition.wait",
               "sem_wait", "sem_timedwait", "WaitForMultipleObjects", "__GI___poll", "poll (libc",
               "std::condition_variable::wait")


def waiting(frames: list[str]) -> bool:
    """Whether a sample's thread waits: a wait frame in what runs below its innermost Python
    frame (that frame included). Not anywhere on the stack: uvloop calls a protocol's
    ``data_received`` from inside ``uv__io_poll``, and that work is not a wait."""
    last_python = max((i for i, f in enumerate(frames) if ".py:" in f), default=0)
    return any(w in f for f in frames[last_python:] for w in WAIT_FRAMES)


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
        if waiting(frames):
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


# Where the HTTP thread's samples go, by stage of an order: the first rule whose pattern is on a
# sample's stack names it (more specific first). Patterns are function names, so they survive
# line moves; a stage that no longer exists just stays empty.
HTTP_STAGES = (
    ("reply send (socket write)", ("RequestResponseCycle.send", "_send_json",
                                   "HeldWriteTransport", "HttpToolsProtocol._answer")),
    ("run views (presented, explain, wait_runs)", ("presented", "explain", "wait_runs")),
    ("telemetry (decisions, latency)", ("count_decisions", "Histogram.observe",
                                        "MutexValue.inc", "order_answered")),
    ("submit hand-off (produce, or wake the appender)", ("Service.submit", "_submit_raw",
                                                         "Node.submit", "submit_to",
                                                         "submit_then")),
    ("reply check (after the wait)", ("_apply (runner/operations.py", "reply_checked")),
    ("limits check", ("check_event", "check_fields", "check_entry_size")),
    ("auth", ("HotPath._client", "AuthStore.principal")),
    ("body read", ("_read_body", "RequestResponseCycle.receive")),
    ("body decode + entry/reply encode", ("HotPath._event", "serve_order", "_answer_json",
                                          "event_answer")),
    ("settle wakeup (node thread -> loop)", ("_Inbox._drain", "_settle", "_set_if_pending")),
    ("hot path other", ("HotPath.", "receive_event", "RailflowAPI.__call__", "event_order")),
    ("HTTP parse (httptools callbacks)", ("data_received", "on_url", "on_header",
                                         "on_headers_complete", "on_message_complete",
                                         "on_body")),
    ("uvicorn per request (cycle, task)", ("run_asgi", "on_response_complete",
                                           "RequestResponseCycle")),
)


def http_stages(raw: Path, thread: str = "MainThread") -> str:
    """The busy samples of ``thread`` (uvicorn's event loop) by stage of an order
    (``HTTP_STAGES``), as shares of that thread's busy samples."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not stack or re.sub(r"^thread \(\d+\): ", "", frames[0]) != thread:
            continue
        if waiting(frames):
            continue
        n = int(count)
        total += n
        stage = next((name for name, pats in HTTP_STAGES if any(p in stack for p in pats)),
                     "event loop other (uvloop, callbacks, GC)")
        counts[stage] += n
    if not total:
        return f"no busy samples of {thread}"
    out = [f"{thread} by stage of an order ({total} busy samples):"]
    for name, n in counts.most_common():
        out.append(f"  {100 * n / total:5.1f}%  {name}")
    return "\n".join(out)


def _thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
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


def _spy(spy: str, pid: int, raw: Path, duration_s: float, args) -> subprocess.Popen:
    cmd = [spy, "record", "--idle", "--threads", "-r", str(args.sample_rate), "-p", str(pid),
           "-o", str(raw), "--format", "raw", "-d", str(int(duration_s) + 1), "--nonblocking"]
    if args.no_native:  # no native frames to tell a wait by: py-spy's own idle test
        cmd.remove("--idle")
    else:
        cmd.remove("--nonblocking")
        cmd.append("--native")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def thread_table(pid: int, before: dict, after: dict, raw: Path, ok: int,
                 unit: str = "order") -> str:
    """CPU µs per order (per ``unit``: ``ok`` of them) of each thread; threads py-spy did not
    name (no Python frame) are summed by the kernel's thread name, digits dropped
    (``rdk:broker*``)."""
    names = _thread_names(raw)
    rows: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for tid, (user, system) in after.items():
        user -= before.get(tid, (0.0, 0.0))[0]
        system -= before.get(tid, (0.0, 0.0))[1]
        name = names.get(tid) or kernel_thread_name(pid, tid)
        rows[name][0] += user
        rows[name][1] += system
    per = 1e6 / max(ok, 1)
    total = sum(u + s for u, s in rows.values())
    out = [f"CPU µs per {unit} by thread, user + system (the kernel's per-thread times, 10 ms "
           f"ticks); total {total * per:.0f}:"]
    for name, (user, system) in sorted(rows.items(), key=lambda kv: -sum(kv[1])):
        if user + system > 0:
            out.append(f"  {(user + system) * per:7.1f} = {user * per:6.1f} + {system * per:6.1f}"
                       f"  {name}")
    return "\n".join(out)


def _cpu_over_orders(pids: dict[str, int], url: str, key: str, args, seed: int,
                     caught_up) -> tuple[dict, dict, int]:
    """(before, after) of each process's and thread's CPU over ``args.orders`` orders sent to
    ``url``, and how many were answered."""
    before = {role: (cpu_s(pid), _thread_cpu(pid)) for role, pid in pids.items()}
    load = run_load([url], "/v1/events", key, args.rate, args.orders / args.rate, 0.0, seed)
    if caught_up is not None:
        caught_up()
    after = {role: (cpu_s(pid), _thread_cpu(pid)) for role, pid in pids.items()}
    if load["errors"]:
        print(f"errors {load['errors']}")
    return before, after, args.orders - sum(load["errors"].values())


def profile(pids: dict[str, int], raws: dict[str, Path], url: str, key: str, args,
            caught_up=None) -> None:
    """Each process of ``pids`` (role -> pid) over ``args.orders`` orders sent to ``url``, then
    sampled over as many again; prints each one's threads and top frames. The per-thread CPU
    is read over the orders not sampled: py-spy stops the process for each sample (with
    native frames), and work that piles up meanwhile is done in larger batches, cheaper per
    order. ``caught_up()`` waits until every node applied the orders, so that a follower's
    CPU for them is all counted."""
    idle_before = {role: _thread_cpu(pid) for role, pid in pids.items()}
    time.sleep(args.idle_s)
    idle_after = {role: _thread_cpu(pid) for role, pid in pids.items()}
    before, after, ok = _cpu_over_orders(pids, url, key, args, 2, caught_up)
    spy = _py_spy()
    spies = {role: _spy(spy, pid, raws[role], args.orders / args.rate, args)
             for role, pid in pids.items()}
    time.sleep(0.5)
    sampled_before, sampled_after, sampled_ok = _cpu_over_orders(pids, url, key, args, 3,
                                                                 caught_up)
    for p in spies.values():
        p.wait()
    for role, pid in pids.items():
        per = 1e6 / max(ok, 1)
        sampled = (sampled_after[role][0] - sampled_before[role][0]) * 1e6 / max(sampled_ok, 1)
        print(f"\n######## {role} (pid {pid}): CPU per order "
              f"{(after[role][0] - before[role][0]) * per:.0f} µs, while sampled {sampled:.0f} "
              f"(noisy); stacks in {raws[role]}")
        print(thread_table(pid, before[role][1], after[role][1], raws[role], ok))
        # What the node spends with no order at all: part of every order's figure above
        # (bench/api_cost.py's cpu_us_per_order counts it too), at ``--rate`` orders a second.
        print(f"idle, before the orders ({args.idle_s:.0f} s): "
              + thread_table(pid, idle_before[role], idle_after[role], raws[role],
                             max(1, round(args.idle_s)), "second"))
        print(http_stages(raws[role]))
        if args.server == "native":  # the front's Python thread (its runtime is native)
            print(http_stages(raws[role], "http-native-py"))
        print(summarize(raws[role], args.top))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=6_000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--sample-rate", type=int, default=200)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--idle-s", type=float, default=10.0,
                        help="seconds without orders, before them, over which each thread's "
                             "idle CPU is read")
    parser.add_argument("--raw", type=Path, default=Path("prof.txt"),
                        help="py-spy's folded stacks; with --cluster one file per node, "
                             "named <stem>-leader<suffix> and <stem>-follower<suffix>")
    parser.add_argument("--cluster", action="store_true",
                        help="three nodes on infra/'s cluster as bench/api_cost.py starts "
                             "them; the leader and one follower are sampled")
    parser.add_argument("--asgi-orders", action="store_true",
                        help="embedded: orders through ASGI (RAILFLOW_LEAN_ORDERS=false), the "
                             "peer of the lean orders")
    parser.add_argument("--stages-of", type=Path, default=None,
                        help="only print the HTTP thread's stages of an existing --raw file")
    parser.add_argument("--server", default=Settings.model_fields["server"].default,
                        choices=["uvicorn", "native", "granian"],
                        help="the node's HTTP server (RAILFLOW_SERVER)")
    parser.add_argument("--no-native", action="store_true",
                        help="Python frames only, sampled without stopping the node (py-spy "
                             "decides what is idle)")
    args = parser.parse_args(argv)
    if args.stages_of is not None:
        print(http_stages(args.stages_of))
        return 0
    _py_spy()
    warmup_s = 1_000 / args.rate
    if not args.cluster:
        proc, url, key, _ = _start_embedded(args.server, True, not args.asgi_orders)
        try:
            run_load([url], "/v1/events", key, args.rate, warmup_s, 0.0, 1)
            time.sleep(1.0)
            profile({"node": proc.pid}, {"node": args.raw}, url, key, args)
        finally:
            _stop(proc)
        return 0
    with started_cluster(args.server) as (cluster, leader):
        follower = next(n for n in cluster.nodes.values() if n.node_id != leader.node_id)
        urls = {n.node_id: n.url for n in cluster.nodes.values()}
        run_load([leader.url], "/v1/events", cluster.api_key, args.rate, warmup_s, 0.0, 1)
        wait_caught_up(leader.url, urls)
        time.sleep(1.0)
        print(f"leader {leader.node_id}, follower {follower.node_id} sampled")
        raws = {role: args.raw.with_name(f"{args.raw.stem}-{role}{args.raw.suffix}")
                for role in ("leader", "follower")}
        profile({"leader": leader.proc.pid, "follower": follower.proc.pid}, raws, leader.url,
                cluster.api_key, args, lambda: wait_caught_up(leader.url, urls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
