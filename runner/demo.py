"""The demo: W1's metrics and the W3 workflow preloaded into an empty state, demo credentials,
and synthetic order traffic for ``railflow demo traffic``.

The W3 workflow is ``workflows.examples.w3_demo()`` with its score node pointed at the
built-in demo model (``builtin:demo``), which scores inside apply with no outside call.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from runner.scoring import BUILTIN_DEMO
from runner.state import entries, queries

if TYPE_CHECKING:
    from runner.service import Service

log = logging.getLogger(__name__)

W1_METRICS = (
    "SELECT SUM(amount) AS card_sum_5m, COUNT(*) AS card_count_5m "
    "FROM payments GROUP BY card RANGE 5 MINUTES",
    "SELECT AVG(amount) AS merchant_avg_5m FROM payments GROUP BY merchant RANGE 5 MINUTES",
)
DEMO_USER = "demo"
preload_timeout_s = 30.0


def w3_definition(scorer: str = BUILTIN_DEMO) -> dict[str, Any]:
    """The W3 demo workflow as JSON, its score nodes calling ``scorer``."""
    from workflows.examples import w3_demo

    definition = w3_demo().model_dump(mode="json")
    for node in definition["nodes"]:
        if node["kind"] == "score":
            node["app"] = scorer
    return definition


def preload(service: Service) -> bool:
    """On the leader, define W1's metrics and publish W3 if the state has no workflow yet.

    Returns True once nothing is left to do."""
    cur = service.reader()
    try:
        empty = not queries.workflows(cur) and not queries.metrics(cur)
    finally:
        cur.close()
    if not empty:
        return True
    timeout = preload_timeout_s
    for text in W1_METRICS:
        service.node.submit(entries.METRIC_DEFINED, entries.encode({"text": text}),
                            timeout).result(timeout)
    definition = w3_definition()
    applied = service.node.submit(
        entries.WORKFLOW_PUBLISHED,
        entries.encode({"workflow_id": definition["id"], "definition": definition,
                        "by": "demo"}), timeout).result(timeout)
    reply = service.reply_of(applied)
    if not reply.ok:
        log.error("demo workflow not published: %s (%s)", reply.error, reply.field)
    else:
        log.info("demo workflow %s published as version %s", definition["id"],
                 reply.result["version"])
    return True


# ---------------------------------------------------------------- synthetic orders
COUNTRIES = ("US", "US", "US", "CA", "GB", "DE", "FR", "BR", "NG", "RU")
CHANNELS = ("card-present", "card-not-present")


class OrderGenerator:
    """Seeded synthetic orders with the transaction fields of WORKLOADS.md.

    Cards are reused (so 5-minute velocity metrics move); a small share of cards burst (card
    testing) to exercise the velocity rule.
    """

    def __init__(self, seed: int = 7, cards: int = 5_000, merchants: int = 500,
                 prefix: str = "o") -> None:
        self._rng = random.Random(seed)
        self._cards = cards
        self._merchants = merchants
        self._prefix = prefix
        self._n = 0

    def order(self) -> dict[str, Any]:
        r = self._rng
        self._n += 1
        card_n = r.randrange(self._cards) if r.random() > 0.05 else r.randrange(20)
        fraud = r.random() < 0.02
        data = {
            "card": f"card-{card_n}", "customer": f"cust-{card_n // 2}",
            "merchant": f"m-{int(r.paretovariate(1.2)) % self._merchants}",
            "mcc": str(r.choice((5411, 5732, 5999, 7995, 4829))),
            "country": r.choice(COUNTRIES), "region": r.choice(("north", "south", "east")),
            "channel": r.choice(CHANNELS), "device": f"dev-{r.randrange(20_000)}",
            "ip": f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)}",
            "shipping_address": f"addr-{r.randrange(50_000)}",
            "amount": int(r.lognormvariate(8.0, 1.2)), "currency": "USD",
            "is_fraud": fraud, "is_storno": False, "is_alert": False,
        }
        return {"event_id": f"{self._prefix}-{self._n}", "type": "order", "data": data}
