"""Deterministic small event streams for the engine tests."""

from __future__ import annotations

import random

T0 = 1_700_000_000_000

METRICS = [
    "SELECT SUM(amount) AS s5, COUNT(*) AS n5, MAX(amount) AS mx5 FROM payments "
    "GROUP BY card RANGE 5 MINUTES",
    "SELECT AVG(amount) AS avg5 FROM payments GROUP BY merchant RANGE 5 MINUTES",
    "SELECT MIN(amount) AS mn1d, COUNT(DISTINCT merchant) AS dm1d, OLDEST(amount) AS old1d, "
    "STDDEV(amount) AS sd1d FROM payments GROUP BY card RANGE 1 HOURS DELAY 5 MINUTES",
    "SELECT TIME_SINCE_LAST() AS since FROM payments GROUP BY card RANGE 1 DAYS EXCLUDING CURRENT",
    "SELECT RATIO(channel = 'cnp') AS cnp, SKEWNESS(amount) AS sk FROM payments "
    "GROUP BY card HOPPING 2 HOURS EVERY 30 MINUTES",
]


def events(n: int, seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    t, out = T0, []
    for i in range(n):
        t += rng.choice([0, 1_000, 15_000, 60_000, 200_000])
        out.append((t, {"id": i, "card": f"c{rng.randrange(20)}",
                        "merchant": f"m{rng.randrange(8)}",
                        "channel": rng.choice(["cnp", "cp"]),
                        "amount": rng.choice([rng.randrange(1, 50_000),
                                              round(rng.uniform(1, 500), 2)])}))
    return out
