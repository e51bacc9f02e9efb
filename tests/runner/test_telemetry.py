"""runner.telemetry: the order statistics counted in plain integers expose what
prometheus_client's own Histogram and Counter would, fed the same orders."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runner.telemetry import LATENCY_BUCKETS_S, Telemetry

ORDERS = [([{"decision": "accept"}], 0.0004), ([{"decision": "decline"}, {"decision": None}],
                                               0.002),  # on a bound: counted in its bucket
          ([], 0.0031), ([{"decision": "accept"}], 0.7), ([{"decision": "review"}], 12.0)]


def _samples(registry: CollectorRegistry, names: set[str]) -> dict:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name in names:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_order_stats_expose_what_prometheus_client_would():
    ours = Telemetry()
    ref = CollectorRegistry()
    hist = Histogram("railflow_event_seconds", "x", buckets=LATENCY_BUCKETS_S, registry=ref)
    decisions = Counter("railflow_decisions", "x", ["decision"], registry=ref)
    for runs, seconds in ORDERS:
        ours.order_answered(runs, seconds)
        hist.observe(seconds)
        for run in runs:
            if run["decision"] is not None:
                decisions.labels(run["decision"]).inc()
    names = {"railflow_event_seconds_bucket", "railflow_event_seconds_count",
             "railflow_event_seconds_sum", "railflow_decisions_total"}
    got, want = _samples(ours.registry, names), _samples(ref, names)
    assert got == want
    assert got[("railflow_decisions_total", (("decision", "accept"),))] == 2
    assert got[("railflow_event_seconds_bucket", (("le", "0.002"),))] == 2
