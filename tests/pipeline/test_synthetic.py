"""The synthetic generator: deterministic, sorted, complete columns, fraud patterns present."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import synthetic

COLUMNS = ["event_id", "seq", "ts", "card", "customer", "merchant", "mcc", "country", "region",
           "channel", "device", "ip", "shipping_address", "amount", "currency", "is_fraud",
           "is_storno", "is_alert"]


@pytest.fixture
def small_days(monkeypatch):
    monkeypatch.setattr(synthetic, "EVENTS_PER_DAY", 5_000)  # 20 k events = 4 blocks


def test_tiny_is_deterministic_sorted_and_typed():
    a = synthetic.generate("tiny", 7)
    assert a.equals(synthetic.generate("tiny", 7))
    assert not a.equals(synthetic.generate("tiny", 8))
    assert a.column_names == COLUMNS
    assert a.num_rows == 10_000
    assert a.schema.field("ts").type == pa.int64() and a.schema.field("amount").type == pa.int64()
    ts = a["ts"].to_numpy()
    assert (np.diff(ts) >= 0).all()
    assert (a["seq"].to_numpy() == np.arange(a.num_rows)).all()
    assert len(set(a["event_id"].to_pylist())) == a.num_rows
    assert set(a["channel"].to_pylist()) == {"cp", "cnp"}
    assert (a["amount"].to_numpy() > 0).all()


def test_blocks_batches_and_partitions_agree(small_days):
    whole = synthetic.generate(20_000, 3)
    assert synthetic.blocks(20_000) == 4 and whole.num_rows == 20_000
    assert pa.concat_tables(synthetic.iter_batches(20_000, 3)).equals(whole)
    parts = [synthetic.generate_partition(20_000, 3, p, 3) for p in range(3)]
    assert sum(p.num_rows for p in parts) == 20_000
    assert pa.concat_tables(parts).sort_by("seq").equals(whole)


def test_fraud_patterns_include_cadence_attacks_that_dodge_hopping_windows(small_days):
    t = synthetic.generate(20_000, 5).to_pandas()
    fraud = t[t.is_fraud == 1]
    assert 0 < len(fraud) < 0.02 * len(t)
    found = 0
    for _card, g in fraud.groupby("card"):
        ts = np.sort(g.ts.to_numpy())
        for i in range(len(ts) - 4):
            if ts[i + 4] - ts[i] < 300_000:  # five payments inside a sliding 5 minutes
                hop_max = max(((ts >= s) & (ts < s + 300_000)).sum()
                              for s in range(int(ts[i]) // 60_000 * 60_000 - 300_000,
                                             int(ts[i + 4]) + 60_000, 60_000))
                found += hop_max <= 4
    assert found > 0


def test_cli_writes_parquet(tmp_path):
    out = tmp_path / "x.parquet"
    subprocess.run([sys.executable, "-m", "pipeline.synthetic", "--size", "tiny", "--seed", "7",
                    "--out", str(out)], check=True, capture_output=True)
    assert pq.read_table(out).equals(synthetic.generate("tiny", 7))



def test_a_slice_of_days_is_the_data_sets_first_days():
    from itertools import islice

    from pipeline.synthetic import iter_batches

    size = 1_500_000  # three days of 500 k
    first = list(iter_batches(size, 7, days=2))
    assert len(first) == 2
    assert all(t.equals(b) for t, b in zip(first, islice(iter_batches(size, 7), 2),
                                           strict=True))
