"""Named metric sets of WORKLOADS.md in the metric language: W1, W2 and W3's workflow metrics.

W2 is the thesis's scenarios 1 and 2 (per card, and per card x 8 attributes), each over a
continuously sliding 24 h window and daily-sliding 7, 28, 182 and 392-day windows, each with
9 aggregations: 405 features. ``RATIO`` is the share of card-not-present payments (the
synthetic ``channel`` is "cp" or "cnp"). Callers pick a set by name with :func:`definitions`.
"""

from __future__ import annotations

W1 = [
    "SELECT SUM(amount) AS q1_sum, COUNT(*) AS q1_count FROM payments GROUP BY card "
    "RANGE 5 MINUTES",
    "SELECT AVG(amount) AS q2_avg FROM payments GROUP BY merchant RANGE 5 MINUTES",
]

# The metric names the W3 demo workflow reads (workflows.examples.W3_METRICS).
W3 = [
    "SELECT SUM(amount) AS card_sum_5m, COUNT(*) AS card_count_5m FROM payments "
    "GROUP BY card RANGE 5 MINUTES",
    "SELECT AVG(amount) AS merchant_avg_5m FROM payments GROUP BY merchant RANGE 5 MINUTES",
]

W2_GROUPINGS = ["card", "card, mcc", "card, merchant", "card, country", "card, region",
                "card, channel", "card, device", "card, currency", "card, shipping_address"]
W2_WINDOWS = {
    "24h": "RANGE 24 HOURS",
    "7d": "HOPPING 7 DAYS EVERY 1 DAY",
    "28d": "HOPPING 28 DAYS EVERY 1 DAY",
    "182d": "HOPPING 182 DAYS EVERY 1 DAY",
    "392d": "HOPPING 392 DAYS EVERY 1 DAY",
}
# SKEWNESS first: the order-3 power-sum state it creates then serves SUM, AVG and STDDEV.
W2_AGGS = [("SKEWNESS(amount)", "skew"), ("SUM(amount)", "sum"), ("AVG(amount)", "mean"),
           ("COUNT(amount)", "count"), ("STDDEV(amount)", "std"),
           ("COUNT(DISTINCT merchant)", "merchants"), ("OLDEST(amount)", "oldest"),
           ("RECENT(amount)", "recent"), ("RATIO(channel = 'cnp')", "cnp_ratio")]


def w2(groupings: list[str] | None = None) -> list[str]:
    """The W2 definitions (all 9 groupings unless told), one per grouping x window."""
    out = []
    for g in groupings or W2_GROUPINGS:
        slug = g.replace(", ", "_")
        for wslug, window in W2_WINDOWS.items():
            aggs = ", ".join(f"{a} AS {slug}_{n}_{wslug}" for a, n in W2_AGGS)
            out.append(f"SELECT {aggs} FROM payments GROUP BY {g} {window}")
    return out


SETS = {"w1": lambda: list(W1), "w3": lambda: list(W3), "w2": w2,
        "w2_card": lambda: w2(["card"])}


def definitions(name: str) -> list[str]:
    """The definitions of a named set: w1, w2, w2_card (scenario 1 only) or w3."""
    if name not in SETS:
        raise KeyError(f"unknown metric set {name!r}; known: {sorted(SETS)}")
    return SETS[name]()
