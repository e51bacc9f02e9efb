"""A follower's log reader: CPU per record and delivery delay against its fetch wait, and
what a follower ``replog.Node`` adds to its reader per record (apply left out).

A follower reads the Kafka log with ``replog.kafka.consumer_config(follower=True)``: the broker
holds each fetch until ``follower_fetch_min_bytes`` arrived or ``follower_fetch_wait_max_ms``
passed, so a longer wait means fewer fetches and wakeups of the node loop per record, and a
later apply of each entry on the follower (a request forwarded through it waits for that:
read-your-writes). This appends records of an order's size at a fixed rate on infra/'s real
Kafka (one record per append, as a leader's group commit at these rates) and runs one reader
process per wait setting on the same topic at the same time (same noise for all), each
polling as ``replog.node``'s loop does. Per setting: the reader process's CPU µs per record
(every thread: the poll loop and librdkafka's), records per wakeup, and the delay from append
to the reader's poll returning it (p50, p99, max: what a forwarded request pays on top).

Beside them, at the node's own setting, a process runs a follower ``replog.Node`` on the same
topic with a state machine whose apply does nothing for these records (``DictKV`` ignores
their kind): the difference between its CPU per record and the bare reader's is the node's
own work per record (decode, fence, bookkeeping, wakeups). Each row splits the process's CPU
into the thread that polls (the bare reader's main thread, the node's ``replog-loop``) and the
rest (librdkafka's threads, and the node's appender and election, idle here).

    .venv/bin/python bench/follower_fetch.py               # 500 and 1,000/s, 25 s each
    .venv/bin/python bench/follower_fetch.py --quick       # a glance (noisy)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Report  # noqa: E402
from replog import kafka  # noqa: E402
from replog.entry import _HEADER, Entry  # noqa: E402

_HEADER_BYTES = _HEADER.size

WAITS_MS = (5, 10, 20)
RECORD_BYTES = 450  # an EventReceived entry of a W3 order, about
KIND = "bench.record"  # no kind the reference state machine applies
warmup_s = 2.0


def _stamp(value: bytes) -> int:
    """The append's wall time (ns) a record carries: its payload's first 19 digits."""
    start = _HEADER_BYTES + len(KIND)
    return int(value[start:start + 19])


def _thread_cpu_s(native_id: int) -> float:
    import psutil

    for t in psutil.Process().threads():
        if t.id == native_id:
            return t.user_time + t.system_time
    return 0.0


def _row(kind: str, wait_ms: int, records: int, wakes: int, cpu: float, poller_cpu: float,
         delays: list[float]) -> dict:
    delays.sort()
    return {"reader": kind, "wait_ms": wait_ms, "records": records,
            "per_wakeup": records / max(wakes, 1),
            "cpu_us_per_record": cpu / max(records, 1) * 1e6,
            "poller_us_per_record": poller_cpu / max(records, 1) * 1e6,
            "delay_p50_ms": statistics.median(delays) if delays else None,
            "delay_p99_ms": delays[int(len(delays) * 0.99)] if delays else None,
            "delay_max_ms": delays[-1] if delays else None}


def reader(topic: str, wait_ms: int, seconds: float) -> dict:
    """Poll like the node loop for ``seconds`` after a warm-up; CPU of this whole process."""
    import threading

    from infra.endpoints import KAFKA_BOOTSTRAP

    kafka.follower_fetch_wait_max_ms = wait_ms
    r = kafka.KafkaLogReader(KAFKA_BOOTSTRAP, topic, 0, 3, follower=True)
    end = time.monotonic() + warmup_s
    while time.monotonic() < end:
        r.poll(0.05, 256)
    me = threading.get_native_id()
    records, wakes, delays = 0, 0, []
    cpu0, mine0, t0 = time.process_time(), _thread_cpu_s(me), time.monotonic()
    while time.monotonic() - t0 < seconds:
        got = r.poll(0.05, 256)
        if got:
            now = time.time_ns()
            wakes += 1
            records += len(got)
            delays += [(now - _stamp(value)) / 1e6 for _, value in got]
    cpu, mine = time.process_time() - cpu0, _thread_cpu_s(me) - mine0
    r.close()
    return _row("bare reader", wait_ms, records, wakes, cpu, mine, delays)


def node_reader(topic: str, seconds: float) -> dict:
    """A follower ``Node`` on the topic (the node's own fetch settings) for ``seconds`` after
    a warm-up; CPU of this whole process and of its loop thread."""
    import threading

    from infra.endpoints import KAFKA_BOOTSTRAP
    from replog import Node
    from replog.testing.dictkv import DictKV
    from replog.testing.memlog import ManualElection

    seen = {"records": 0, "delays": []}

    def on_effects(entry, _effects) -> None:
        seen["records"] += 1
        seen["delays"].append((time.time_ns() - int(entry.payload[:19])) / 1e6)

    node = Node(DictKV(), kafka.KafkaLog(KAFKA_BOOTSTRAP, topic, create=False, log_level=3),
                ManualElection({}), node_id="bench", advertise_url="bench", on_effects=on_effects)
    node.start()
    time.sleep(warmup_s)
    loop = next(t for t in threading.enumerate() if t.name.startswith("replog-loop"))
    seen["records"], seen["delays"] = 0, []
    wakes0 = node.reads
    cpu0, loop0 = time.process_time(), _thread_cpu_s(loop.native_id)
    time.sleep(seconds)
    cpu, loop_cpu = time.process_time() - cpu0, _thread_cpu_s(loop.native_id) - loop0
    records, delays, wakes = seen["records"], list(seen["delays"]), node.reads - wakes0
    node.stop()
    return _row("follower node", kafka.follower_fetch_wait_max_ms, records, wakes, cpu,
                loop_cpu, delays)


def produce(topic: str, rate: int, seconds: float) -> int:
    from infra.endpoints import KAFKA_BOOTSTRAP

    log = kafka.KafkaLog(KAFKA_BOOTSTRAP, topic, log_level=3)
    pad = b"x" * (RECORD_BYTES - 19)
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        delay = t0 + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        payload = str(time.time_ns()).encode() + pad  # the append's wall time, 19 digits
        log.append([Entry(-1, 1, n, KIND, payload, n).encode()])
        n += 1
    log.close()
    return n


def run_rate(rate: int, seconds: float) -> list[dict]:
    from infra.endpoints import KAFKA_BOOTSTRAP

    topic = f"bench-follower-fetch-{uuid.uuid4().hex[:8]}"
    kafka.ensure_topic(KAFKA_BOOTSTRAP, topic)
    procs = [subprocess.Popen([sys.executable, __file__, "--reader", topic, str(w),
                               str(seconds)], stdout=subprocess.PIPE, text=True)
             for w in WAITS_MS]
    procs.append(subprocess.Popen([sys.executable, __file__, "--reader", topic, "node",
                                   str(seconds)], stdout=subprocess.PIPE, text=True))
    produce(topic, rate, seconds + warmup_s + 3)
    return [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--reader", nargs=3, metavar=("TOPIC", "WAIT_MS", "SECONDS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reader:
        topic, wait_ms, seconds = args.reader
        if wait_ms == "node":
            print(json.dumps(node_reader(topic, float(seconds))))
        else:
            print(json.dumps(reader(topic, int(wait_ms), float(seconds))))
        return
    seconds = args.seconds or (8.0 if args.quick else 25.0)
    report = Report("follower_fetch", args.quick)
    for rate in (500, 1_000):
        for row in run_rate(rate, seconds):
            report.add(what=f"{row['reader']} at {rate}/s, fetch wait {row['wait_ms']} ms",
                       records=row["records"], per_wakeup=round(row["per_wakeup"], 1),
                       cpu_us_per_record=round(row["cpu_us_per_record"], 1),
                       poller_us_per_record=round(row["poller_us_per_record"], 1),
                       delay_p50_ms=round(row["delay_p50_ms"], 2),
                       delay_p99_ms=round(row["delay_p99_ms"], 2),
                       delay_max_ms=round(row["delay_max_ms"], 2))
    report.write(["what", "records", "per_wakeup", "cpu_us_per_record",
                  "poller_us_per_record", "delay_p50_ms",
                  "delay_p99_ms", "delay_max_ms"])


if __name__ == "__main__":
    main()
