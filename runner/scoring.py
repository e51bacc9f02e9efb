"""The built-in demo scoring app: a deterministic fraud score 0..100 from an order's fields.

Pure (no I/O, no clock), so a workflow whose score node names ``builtin:demo`` is scored inside
``apply`` on every node alike; the same function is served over HTTP at ``/demo/score`` to
stand in for an outside scoring app.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

BUILTIN_DEMO = "builtin:demo"
HIGH_RISK_COUNTRIES = frozenset({"NG", "RU", "BR", "ID", "VN", "UA"})


def _unit(*parts: Any) -> float:
    """A stable pseudo-random number in [0, 1) from the given fields."""
    raw = "\x1f".join("" if p is None else str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=4).digest(), "big") / 2**32


def demo_score(data: Mapping[str, Any]) -> int:
    """Score an order: larger amounts, risky countries, card-not-present and new devices add risk.

    >>> demo_score({"amount": 100, "country": "US", "channel": "card-present"}) < 60
    True
    >>> demo_score({"amount": 900_000, "country": "NG", "channel": "card-not-present"}) > 80
    True
    """
    amount = data.get("amount", 0)
    amount = amount if isinstance(amount, int | float) and amount > 0 else 0
    score = 25.0 * _unit(data.get("card"), data.get("device"), data.get("merchant"))
    score += min(35.0, amount / 10_000)  # 35 points at 3,500.00 in minor units
    if str(data.get("country", "")).upper() in HIGH_RISK_COUNTRIES:
        score += 25
    if data.get("channel") == "card-not-present":
        score += 10
    if data.get("is_fraud"):  # the synthetic generator's label: the demo model is "good"
        score += 30
    return max(0, min(100, round(score)))
