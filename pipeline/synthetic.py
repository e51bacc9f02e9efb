"""Deterministic synthetic card transactions (numpy-vectorized, no Spark needed).

The same ``(size, seed)`` gives the same events everywhere: demo, tests, benchmarks, Spark.
Sizes: ``tiny`` (10 k events over 1 day), ``small`` (1 M over 2 days), ``month`` (15 M over 30
days), or an int (events; 500 k per day). Data are generated one day (a *block*) at a time from a
seed derived from ``(seed, block)``, so ``iter_batches`` streams ``month`` without holding it and
``generate_partition`` lets a Spark job build blocks in parallel; every path yields identical rows.

Columns (WORKLOADS.md): ``event_id`` (str), ``seq`` (int64 log position), ``ts`` (epoch ms,
int64, sorted), ``card``, ``customer``, ``merchant`` (int64 ids), ``mcc`` (int32), ``country``,
``region``, ``channel`` ("cp" / "cnp"), ``device`` (int64), ``ip`` (str), ``shipping_address``
(int64), ``amount`` (int64 minor units), ``currency``, ``is_fraud``, ``is_storno``, ``is_alert``
(int8).

Fraud patterns: card testing (bursts of small card-not-present amounts within minutes),
account takeover (new device + new address + a high amount, then a few follow-ups), and cadence
attacks: five payments within 4.5 minutes placed so that no 5-minute window hopping every
minute sees more than four of them (Railgun, Figure 1), while a sliding window sees five.

CLI: ``python -m pipeline.synthetic --size tiny --seed 7 --out x.parquet``.

>>> t = generate("tiny", 7)
>>> t.num_rows, t.column_names[:4]
(10000, ['event_id', 'seq', 'ts', 'card'])
>>> generate("tiny", 7).equals(t)
True
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SIZES = {"tiny": (10_000, 1), "small": (1_000_000, 2), "month": (15_000_000, 30)}
EVENTS_PER_DAY = 500_000  # for integer sizes
DAY_MS = 86_400_000
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
CARDS_MAX = 2_000_000
MERCHANTS_MAX = 5_000_000
FRAUD_SHARE = 0.004  # fraction of events that belong to a fraud pattern

COUNTRIES = np.array(["CH", "DE", "FR", "IT", "AT", "US", "GB", "ES", "NL", "CA"])
COUNTRY_P = np.array([0.55, 0.12, 0.08, 0.06, 0.04, 0.05, 0.04, 0.03, 0.02, 0.01])
REGIONS = np.array(["EU", "EU", "EU", "EU", "EU", "NA", "EU", "EU", "EU", "NA"])
CURRENCIES = np.array(["CHF", "EUR", "EUR", "EUR", "EUR", "USD", "GBP", "EUR", "EUR", "CAD"])
MCCS = np.array([5411, 5812, 5541, 5999, 5311, 4121, 5732, 5912, 7011, 4511, 5691, 5814,
                 6011, 5944, 7995], dtype=np.int32)
MCC_P = np.array([0.2, 0.14, 0.1, 0.1, 0.08, 0.06, 0.05, 0.06, 0.04, 0.03, 0.04, 0.06, 0.02,
                  0.01, 0.01])
MCC_MEDIAN_MINOR = np.array([4500, 3800, 6000, 2500, 7000, 2200, 25000, 1800, 18000, 30000,
                             9000, 1200, 20000, 40000, 5000])
HOUR_P = np.array([1, 0.6, 0.4, 0.3, 0.3, 0.5, 1.2, 2.5, 4, 5, 5.5, 6, 6.5, 6, 5.5, 5.5, 6, 6.5,
                   6.5, 6, 5, 4, 3, 2], dtype=float)
HOUR_P /= HOUR_P.sum()


def _plan(size: str | int) -> tuple[int, int]:
    """(events, days) of a size."""
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"size is one of {sorted(SIZES)} or an int, got {size!r}")
        return SIZES[size]
    n = int(size)
    if n <= 0:
        raise ValueError("size must be positive")
    return n, max(1, -(-n // EVENTS_PER_DAY))


def _block_sizes(n: int, days: int) -> np.ndarray:
    base = np.full(days, n // days, dtype=np.int64)
    base[: n % days] += 1
    return base


@functools.lru_cache(maxsize=4)
def _population(n: int, seed: int) -> dict[str, np.ndarray]:
    """Cards, customers and merchants, fixed for a (size, seed)."""
    rng = np.random.default_rng([seed, 0xC0FFEE])
    cards = int(min(CARDS_MAX, max(100, n // 8)))
    merchants = int(min(MERCHANTS_MAX, max(50, n // 3)))
    activity = rng.lognormal(0.0, 1.0, cards)
    home = rng.choice(len(COUNTRIES), cards, p=COUNTRY_P)
    return {
        "card_cdf": np.cumsum(activity) / activity.sum(),
        "card_customer": (np.arange(cards) * 4) // 5,
        "card_home": home,
        "card_device": rng.integers(1, 1 << 40, cards),
        "card_address": rng.integers(1, 1 << 40, cards),
        "merchant_mcc": rng.choice(len(MCCS), merchants, p=MCC_P),
        "merchant_country": np.where(rng.random(merchants) < 0.85,
                                     rng.choice(len(COUNTRIES), merchants, p=COUNTRY_P),
                                     rng.integers(0, len(COUNTRIES), merchants)),
        "cards": np.int64(cards),
        "merchants": np.int64(merchants),
    }


def _ips(rng: np.random.Generator, n: int) -> pa.Array:
    octets = rng.integers(1, 255, (n, 4))
    parts = [pa.array(octets[:, i]).cast(pa.string()) for i in range(4)]
    return pc.binary_join_element_wise(*parts, ".")


def _block(size: str | int, seed: int, block: int) -> pa.Table:
    n, days = _plan(size)
    if not 0 <= block < days:
        raise ValueError(f"block {block} outside [0, {days})")
    sizes = _block_sizes(n, days)
    count = int(sizes[block])
    first_seq = int(sizes[:block].sum())
    pop = _population(n, seed)
    rng = np.random.default_rng([seed, block])
    day0 = START_MS + block * DAY_MS
    n_fraud = int(count * FRAUD_SHARE)
    n_normal = count - n_fraud

    # Normal traffic: daily seasonality, lognormal card activity, Zipf-popular merchants.
    hours = rng.choice(24, n_normal, p=HOUR_P)
    ts = day0 + hours * 3_600_000 + rng.integers(0, 3_600_000, n_normal)
    card = np.searchsorted(pop["card_cdf"], rng.random(n_normal)).astype(np.int64)
    merchant = ((rng.zipf(1.3, n_normal) - 1) % pop["merchants"]).astype(np.int64)
    mcc_i = pop["merchant_mcc"][merchant]
    amount = np.maximum(50, rng.lognormal(np.log(MCC_MEDIAN_MINOR[mcc_i]), 0.8)).astype(np.int64)
    channel_cnp = rng.random(n_normal) < 0.4
    device = pop["card_device"][card]
    address = pop["card_address"][card]
    fraud = np.zeros(n_normal, dtype=np.int8)

    # Fraud patterns, each a group of events on one card.
    f_ts, f_card, f_merchant, f_amount, f_cnp, f_device, f_address = ([] for _ in range(7))
    left = n_fraud
    while left > 0:
        kind = rng.integers(0, 3)
        c = np.int64(np.searchsorted(pop["card_cdf"], rng.random()))
        start = day0 + int(rng.integers(0, DAY_MS - 3_600_000))
        if kind == 0:  # card testing: a burst of small amounts within a few minutes
            k = int(min(left, rng.integers(5, 20)))
            offs = np.sort(rng.integers(0, 180_000, k))
            amt = rng.integers(100, 300, k)
            dev, addr = np.full(k, pop["card_device"][c]), np.full(k, pop["card_address"][c])
        elif kind == 1:  # account takeover: new device + new address + high amounts
            k = int(min(left, rng.integers(1, 4)))
            offs = np.sort(rng.integers(0, 3_600_000, k))
            amt = rng.integers(80_000, 500_000, k)
            dev = np.full(k, rng.integers(1, 1 << 40))
            addr = np.full(k, rng.integers(1, 1 << 40))
        else:  # cadence attack: dodges 5-minute windows hopping every minute
            k = int(min(left, 5))
            minute = start - start % 60_000
            start = minute
            offs = np.array([30_000, 90_000, 150_000, 210_000, 300_000][:k])
            amt = rng.integers(20_000, 60_000, k)
            dev, addr = np.full(k, pop["card_device"][c]), np.full(k, pop["card_address"][c])
        f_ts.append(start + offs)
        f_card.append(np.full(k, c))
        f_merchant.append(((rng.zipf(1.3, k) - 1) % pop["merchants"]).astype(np.int64))
        f_amount.append(amt)
        f_cnp.append(np.full(k, True))
        f_device.append(dev)
        f_address.append(addr)
        left -= k
    if n_fraud:
        ts = np.concatenate([ts, *f_ts])
        card = np.concatenate([card, *f_card])
        merchant = np.concatenate([merchant, *f_merchant])
        amount = np.concatenate([amount, *f_amount]).astype(np.int64)
        channel_cnp = np.concatenate([channel_cnp, *f_cnp])
        device = np.concatenate([device, *f_device]).astype(np.int64)
        address = np.concatenate([address, *f_address]).astype(np.int64)
        fraud = np.concatenate([fraud, np.ones(n_fraud, dtype=np.int8)])
        mcc_i = pop["merchant_mcc"][merchant]
    ts = np.minimum(ts, day0 + DAY_MS - 1)  # keep blocks disjoint in time

    order = np.argsort(ts, kind="stable")
    ts, card, merchant, amount = ts[order], card[order], merchant[order], amount[order]
    channel_cnp, device, address = channel_cnp[order], device[order], address[order]
    fraud, mcc_i = fraud[order], mcc_i[order]
    country_i = pop["merchant_country"][merchant]
    storno = (rng.random(count) < 0.01).astype(np.int8)
    alert = ((rng.random(count) < 0.02) | (fraud.astype(bool) & (rng.random(count) < 0.5)))
    seq = np.arange(first_seq, first_seq + count, dtype=np.int64)
    event_id = pc.binary_join_element_wise(pa.scalar(f"e{seed}"),
                                           pa.array(seq).cast(pa.string()), "-")
    return pa.table({
        "event_id": event_id,
        "seq": pa.array(seq, pa.int64()),
        "ts": pa.array(ts.astype(np.int64), pa.int64()),
        "card": pa.array(card, pa.int64()),
        "customer": pa.array(pop["card_customer"][card].astype(np.int64), pa.int64()),
        "merchant": pa.array(merchant, pa.int64()),
        "mcc": pa.array(MCCS[mcc_i], pa.int32()),
        "country": pa.array(COUNTRIES[country_i], pa.string()),
        "region": pa.array(REGIONS[country_i], pa.string()),
        "channel": pa.array(np.where(channel_cnp, "cnp", "cp"), pa.string()),
        "device": pa.array(device, pa.int64()),
        "ip": _ips(rng, count),
        "shipping_address": pa.array(address, pa.int64()),
        "amount": pa.array(amount, pa.int64()),
        "currency": pa.array(CURRENCIES[country_i], pa.string()),
        "is_fraud": pa.array(fraud, pa.int8()),
        "is_storno": pa.array(storno, pa.int8()),
        "is_alert": pa.array(alert.astype(np.int8), pa.int8()),
    })


def blocks(size: str | int) -> int:
    """How many blocks (days) a size has."""
    return _plan(size)[1]


def iter_batches(size: str | int, seed: int, days: int | None = None) -> Iterator[pa.Table]:
    """The data set one block (day) at a time, in log order; with ``days``, only its first
    ``days`` blocks (the same rows: a slice of the data set, e.g. a day of ``month``)."""
    for b in range(blocks(size) if days is None else min(days, blocks(size))):
        yield _block(size, seed, b)


def generate(size: str | int, seed: int) -> pa.Table:
    """The whole data set as one table, sorted by ts (prefer ``iter_batches`` for month)."""
    return pa.concat_tables(iter_batches(size, seed))


def generate_partition(size: str | int, seed: int, partition: int, partitions: int) -> pa.Table:
    """The blocks ``b`` with ``b % partitions == partition``, concatenated in order."""
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} outside [0, {partitions})")
    parts = [_block(size, seed, b) for b in range(partition, blocks(size), partitions)]
    if not parts:
        return _block(size, seed, 0).slice(0, 0)
    return pa.concat_tables(parts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="tiny", help="tiny, small, month or a number of events")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    size: str | int = int(args.size) if args.size.isdigit() else args.size
    writer = None
    rows = 0
    for table in iter_batches(size, args.seed):
        if writer is None:
            writer = pq.ParquetWriter(args.out, table.schema, compression="zstd")
        writer.write_table(table)
        rows += table.num_rows
    if writer is not None:
        writer.close()
    print(f"wrote {rows} events to {args.out}")


if __name__ == "__main__":
    main()
