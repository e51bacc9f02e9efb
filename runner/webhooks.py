"""Webhook delivery: signed POSTs retried with capped exponential backoff and full jitter.

Each delivery carries ``Idempotency-Key`` (the effect id), so a receiver can drop the
duplicates that a retry or a re-drive after failover may produce.
"""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import orjson

from runner import signing

webhook_timeout_ms = 5_000


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, rng: random.Random) -> int:
    """Delay before retry number ``attempt`` (1-based): uniform in [0, min(cap, base·2^(a-1))]."""
    return rng.randint(0, min(cap_ms, base_ms * 2 ** (attempt - 1)))


async def deliver(
    client: httpx.AsyncClient,
    url: str,
    payload: dict,
    *,
    secret: str,
    idempotency_key: str,
    attempts_max: int,
    base_ms: int,
    cap_ms: int,
    rng: random.Random | None = None,
) -> bool:
    """POST ``payload`` until a 2xx or ``attempts_max`` attempts; True when delivered."""
    rng = rng or random.Random()
    body = orjson.dumps(payload)
    for attempt in range(1, attempts_max + 1):
        headers = {
            "content-type": "application/json",
            "Idempotency-Key": idempotency_key,
            signing.HEADER: signing.sign(secret, body, int(time.time() * 1000)),
        }
        try:
            resp = await client.post(url, content=body, headers=headers,
                                     timeout=webhook_timeout_ms / 1000)
            if resp.status_code < 300:
                return True
            if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
                return False  # the receiver refuses it; retrying will not help
        except httpx.HTTPError:
            pass
        if attempt < attempts_max:
            await asyncio.sleep(backoff_ms(attempt, base_ms, cap_ms, rng) / 1000)
    return False
