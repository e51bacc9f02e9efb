"""A follower's log reader: CPU per record and delivery delay against its fetch wait.

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

WAITS_MS = (5, 10, 20)
RECORD_BYTES = 450  # an EventReceived entry of a W3 order, about
warmup_s = 2.0


def reader(topic: str, wait_ms: int, seconds: float) -> dict:
    """Poll like the node loop for ``seconds`` after a warm-up; CPU of this whole process."""
    from infra.endpoints import KAFKA_BOOTSTRAP

    kafka.follower_fetch_wait_max_ms = wait_ms
    r = kafka.KafkaLogReader(KAFKA_BOOTSTRAP, topic, 0, 3, follower=True)
    end = time.monotonic() + warmup_s
    while time.monotonic() < end:
        r.poll(0.05, 256)
    records, wakes, delays = 0, 0, []
    cpu0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        got = r.poll(0.05, 256)
        if got:
            now = time.time_ns()
            wakes += 1
            records += len(got)
            delays += [(now - int(value[:19])) / 1e6 for _, value in got]
    cpu = time.process_time() - cpu0
    r.close()
    delays.sort()
    return {"wait_ms": wait_ms, "records": records, "per_wakeup": records / max(wakes, 1),
            "cpu_us_per_record": cpu / max(records, 1) * 1e6,
            "delay_p50_ms": statistics.median(delays) if delays else None,
            "delay_p99_ms": delays[int(len(delays) * 0.99)] if delays else None,
            "delay_max_ms": delays[-1] if delays else None}


def produce(topic: str, rate: int, seconds: float) -> int:
    from infra.endpoints import KAFKA_BOOTSTRAP

    log = kafka.KafkaLog(KAFKA_BOOTSTRAP, topic, log_level=3)
    pad = b"x" * (RECORD_BYTES - 19)
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        delay = t0 + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        log.append([str(time.time_ns()).encode() + pad])  # the append's wall time, 19 digits
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
        print(json.dumps(reader(topic, int(wait_ms), float(seconds))))
        return
    seconds = args.seconds or (8.0 if args.quick else 25.0)
    report = Report("follower_fetch", args.quick)
    for rate in (500, 1_000):
        for row in run_rate(rate, seconds):
            report.add(what=f"follower reader at {rate}/s, fetch wait {row['wait_ms']} ms",
                       records=row["records"], per_wakeup=round(row["per_wakeup"], 1),
                       cpu_us_per_record=round(row["cpu_us_per_record"], 1),
                       delay_p50_ms=round(row["delay_p50_ms"], 2),
                       delay_p99_ms=round(row["delay_p99_ms"], 2),
                       delay_max_ms=round(row["delay_max_ms"], 2))
    report.write(["what", "records", "per_wakeup", "cpu_us_per_record", "delay_p50_ms",
                  "delay_p99_ms", "delay_max_ms"])


if __name__ == "__main__":
    main()
