"""Synthetic order traffic at a fixed rate (``railflow demo traffic``)."""

from __future__ import annotations

import collections
import time

import httpx

from runner.demo import OrderGenerator

requests_in_flight_max = 256


def run_traffic(url: str, key: str, rate: float, duration_s: float, seed: int) -> dict:
    """Send orders open-loop at ``rate``/s for ``duration_s`` seconds; count the outcomes."""
    import asyncio

    async def main() -> dict:
        gen = OrderGenerator(seed=seed, prefix=f"demo{seed}-{int(time.time())}")
        counts: collections.Counter[str] = collections.Counter()
        limits = httpx.Limits(max_connections=requests_in_flight_max)
        sem = asyncio.Semaphore(requests_in_flight_max)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10,
                                     headers={"Authorization": f"Bearer {key}"}) as client:

            async def one(order: dict) -> None:
                async with sem:
                    try:
                        r = await client.post("/v1/events", json=order)
                    except httpx.HTTPError as exc:
                        counts[f"error {type(exc).__name__}"] += 1
                        return
                if r.status_code != 200:
                    counts[f"http {r.status_code}"] += 1
                    return
                for run in r.json()["runs"]:
                    counts[run["decision"] or run["state"]] += 1

            start = time.perf_counter()
            tasks = []
            n = 0
            while duration_s <= 0 or time.perf_counter() - start < duration_s:
                due = start + n / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(gen.order())))
                n += 1
            await asyncio.gather(*tasks)
        return {"sent": n, "outcomes": dict(counts)}

    return asyncio.run(main())
