"""Test doubles: a brute-force engine for W1's metrics (an oracle, not the real engine)."""

from __future__ import annotations

import re
from collections import defaultdict

WINDOW_MS = 5 * 60 * 1000


class BruteForceW1Engine:
    """Recomputes W1's three metrics from every stored event, per event."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.events: dict[str, list[tuple[int, dict]]] = defaultdict(list)

    def define(self, text: str) -> list[str]:
        names = re.findall(r"AS (\w+)", text)
        if not names or "FROM" not in text:
            raise ValueError("line 1, column 1: expected SELECT ... AS name FROM")
        self.names += names
        return names

    def drop(self, name: str) -> None:
        self.names.remove(name)

    def ingest(self, stream: str, event: dict, ts_ms: int) -> dict:
        self.events[stream].append((ts_ms, dict(event)))
        live = [e for t, e in self.events[stream] if ts_ms - WINDOW_MS < t <= ts_ms]
        card = [e["amount"] for e in live if e.get("card") == event.get("card")]
        merchant = [e["amount"] for e in live if e.get("merchant") == event.get("merchant")]
        values = {"card_sum_5m": sum(card), "card_count_5m": len(card),
                  "merchant_avg_5m": sum(merchant) / len(merchant)}
        return {k: v for k, v in values.items() if k in self.names}

    def digest(self) -> str:
        return str(sorted((s, len(v)) for s, v in self.events.items()))
