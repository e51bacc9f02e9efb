"""Prometheus metrics of one node, in a registry of its own (several nodes may share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS_S = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25,
                     0.5, 1.0, 2.5, 5.0)


class Telemetry:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("railflow_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.event_latency = Histogram("railflow_event_seconds",
                                       "POST /v1/events latency on this node",
                                       buckets=LATENCY_BUCKETS_S, registry=r)
        self.decisions = Counter("railflow_decisions", "Runs decided, by decision",
                                 ["decision"], registry=r)
        self._decision_children: dict[str, Counter] = {}
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

    def count_decisions(self, runs: list[dict]) -> None:
        for run in runs:
            decision = run["decision"]
            if decision is not None:
                # The labelled child is kept: ``labels`` validates and locks on every call.
                child = self._decision_children.get(decision)
                if child is None:
                    child = self._decision_children[decision] = self.decisions.labels(decision)
                child.inc()
