"""Prometheus metrics of one node, in a registry of its own (several nodes may share a process)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25,
                     0.5, 1.0, 2.5, 5.0)


class Telemetry:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("railflow_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.orders = OrderStats()
        r.register(self.orders)
        self.runs_stored = Counter("railflow_runs_stored", "Run versions written to the store",
                                   registry=r)
        self.app_calls = Counter("railflow_app_calls", "App calls by app and outcome",
                                 ["app", "outcome"], registry=r)
        self.webhooks = Counter("railflow_webhooks", "Webhooks by outcome", ["outcome"],
                                registry=r)
        self.reviews_enqueued = Counter("railflow_reviews_enqueued", "Review tasks by queue",
                                        ["queue"], registry=r)
        self.applied_offset = Gauge("railflow_applied_offset", "Last applied log offset",
                                    registry=r)
        self.is_leader = Gauge("railflow_is_leader", "1 when this node leads", registry=r)
        self.digest_mismatches = Counter(
            "railflow_replica_digest_mismatches",
            "Checkpoint offsets where this node's state digest differs from the stored one",
            registry=r)
        self.entries_rejected = Counter(
            "railflow_entries_rejected", "Log entries apply rejected, by kind and reason "
            "(invalid: a 4xx; internal: a bug caught by apply)", ["kind", "reason"], registry=r)
        self.store_backlog = Gauge("railflow_run_store_backlog", "Runs queued for the store",
                                   registry=r)
        self.runs_awaiting_store = Gauge(
            "railflow_runs_awaiting_store", "Decided runs held in the hot state until the run "
            "store confirms them (the same on every replica)", registry=r)

    def order_answered(self, runs: list[dict], seconds: float) -> None:
        """An order answered after ``seconds`` with ``runs``: the decisions and the latency."""
        self.orders.add(runs, seconds)


class OrderStats(Collector):
    """``railflow_event_seconds`` (a histogram) and ``railflow_decisions`` (a counter by
    decision), counted in plain integers. prometheus_client's ``Histogram.observe`` and
    ``Counter.inc`` take a lock per value and walk their buckets in Python: ~3 µs an order on
    the HTTP thread, for figures read every few seconds. Here an order costs a bisect and a few
    additions under one lock; a scrape builds the families."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)  # the last: above every bound
        self._sum = 0.0
        self._decisions: dict[str, int] = {}

    def add(self, runs: list[dict], seconds: float) -> None:
        i = bisect.bisect_left(LATENCY_BUCKETS_S, seconds)  # le: a bound counts its value
        with self._lock:
            self._buckets[i] += 1
            self._sum += seconds
            for run in runs:
                decision = run["decision"]
                if decision is not None:
                    self._decisions[decision] = self._decisions.get(decision, 0) + 1

    def collect(self) -> Iterator:
        with self._lock:
            buckets, total, decisions = list(self._buckets), self._sum, dict(self._decisions)
        latency = HistogramMetricFamily("railflow_event_seconds",
                                        "POST /v1/events latency on this node")
        cumulative, out = 0, []
        for bound, n in zip((*LATENCY_BUCKETS_S, float("inf")), buckets, strict=True):
            cumulative += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        latency.add_metric([], out, total)
        yield latency
        counter = CounterMetricFamily("railflow_decisions", "Runs decided, by decision",
                                      labels=["decision"])
        for decision, n in sorted(decisions.items()):
            counter.add_metric([decision], n)
        yield counter

    def describe(self) -> Iterator:
        return iter(())  # families known only at a scrape: no name clash check at register
