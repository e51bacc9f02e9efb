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


_NUMBER = (int, float)
_blake2b = hashlib.blake2b
_from_bytes = int.from_bytes


def _text(part: Any) -> str:
    return "" if part is None else part if part.__class__ is str else str(part)


def _unit(a: Any, b: Any, c: Any) -> float:
    """A stable pseudo-random number in [0, 1) from the given fields (None as "", joined by
    \\x1f): apply scores every order with it, so no generic join."""
    raw = f"{_text(a)}\x1f{_text(b)}\x1f{_text(c)}".encode()
    return _from_bytes(_blake2b(raw, digest_size=4).digest(), "big") / 2**32


def demo_score(data: Mapping[str, Any]) -> int:
    """Score an order: larger amounts, risky countries, card-not-present and new devices add risk.

    >>> demo_score({"amount": 100, "country": "US", "channel": "card-present"}) < 60
    True
    >>> demo_score({"amount": 900_000, "country": "NG", "channel": "card-not-present"}) > 80
    True
    """
    amount = data.get("amount", 0)
    amount = amount if isinstance(amount, _NUMBER) and amount > 0 else 0
    score = 25.0 * _unit(data.get("card"), data.get("device"), data.get("merchant"))
    score += min(35.0, amount / 10_000)  # 35 points at 3,500.00 in minor units
    if str(data.get("country", "")).upper() in HIGH_RISK_COUNTRIES:
        score += 25
    if data.get("channel") == "card-not-present":
        score += 10
    if data.get("is_fraud"):  # the synthetic generator's label: the demo model is "good"
        score += 30
    return max(0, min(100, round(score)))
