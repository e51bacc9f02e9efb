"""The built-in demo scorer gives the same score as its reference definition, for the
generator's orders and odd inputs alike (apply scores every order with it on every replica)."""

import hashlib

from runner.demo import OrderGenerator
from runner.scoring import HIGH_RISK_COUNTRIES, demo_score


def reference(data):
    """The scorer as first written: a generic join of the parts, None as ""."""
    raw = "\x1f".join("" if p is None else str(p) for p in (
        data.get("card"), data.get("device"), data.get("merchant"))).encode()
    unit = int.from_bytes(hashlib.blake2b(raw, digest_size=4).digest(), "big") / 2**32
    amount = data.get("amount", 0)
    amount = amount if isinstance(amount, int | float) and amount > 0 else 0
    score = 25.0 * unit + min(35.0, amount / 10_000)
    if str(data.get("country", "")).upper() in HIGH_RISK_COUNTRIES:
        score += 25
    if data.get("channel") == "card-not-present":
        score += 10
    if data.get("is_fraud"):
        score += 30
    return max(0, min(100, round(score)))


class Text(str):
    def __str__(self):
        return "other"


def test_demo_score_is_its_reference_definition():
    gen = OrderGenerator(seed=11)
    orders = [gen.order()["data"] for _ in range(3000)]
    odd = [{}, {"card": None, "device": 5, "merchant": 1.5, "amount": True},
           {"amount": float("nan")}, {"amount": "x", "card": "é", "country": "ng"},
           {"card": Text("a"), "device": b"d", "merchant": ["m"], "amount": 10**9}]
    for data in orders + odd:
        assert demo_score(data) == reference(data), data
