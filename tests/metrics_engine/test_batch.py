"""``ingest_many`` over Arrow and numpy columns gives exactly what ``ingest`` gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from metrics_engine import Engine, MetricInputError

from .streams import METRICS, events


def _engine(path):
    eng = Engine(path, fsync=False, chunk_bytes_target=2048, segment_bytes_max=16 * 1024)
    for m in METRICS:
        eng.define(m)
    return eng


@pytest.mark.parametrize("form", ["arrow", "numpy", "batches"])
def test_batched_values_equal_per_event_values(tmp_path, form):
    # Money in minor units: an Arrow column holds one type, so no int/float mix here.
    stream = [(t, {**ev, "amount": round(ev["amount"] * 100)}) for t, ev in events(2500, 4)]
    ref = _engine(tmp_path / "ref")
    want = [ref.ingest("payments", ev, t) for t, ev in stream]
    ref_digest = ref.digest()
    ref.close()
    eng = _engine(tmp_path / "b")
    rows = [ev for _, ev in stream]
    ts = np.array([t for t, _ in stream], dtype=np.int64)
    got: dict[str, list] = {}
    for lo in range(0, len(rows), 700):  # several batches: state carries across them
        table = pa.Table.from_pylist(rows[lo:lo + 700])
        if form == "numpy":
            cols = {name: table.column(name).to_numpy(zero_copy_only=False)
                    for name in ("id", "card", "merchant", "channel")}
            cols["amount"] = table.column("amount").to_numpy()
            table = cols
        elif form == "batches":
            table = table.to_batches()[0]
        out = eng.ingest_many("payments", ts[lo:lo + 700], table)
        for k, v in out.items():
            got.setdefault(k, []).extend(v)
    for name in want[0]:
        typed = [(type(v), v) for v in got[name]]
        assert typed == [(type(w[name]), w[name]) for w in want], name
    assert eng.digest() == ref_digest
    eng.close()


def test_a_refused_row_says_which(tmp_path):
    eng = _engine(tmp_path / "e")
    eng.ingest("payments", {"card": "a", "amount": 1, "merchant": "m"}, 0)
    cols = {"card": pa.array(["a", "b", "c"]), "amount": pa.array([1, 2, 3]),
            "merchant": pa.array([["m"], ["n"], ["o"]])}  # lists: not a group key
    with pytest.raises(MetricInputError) as e:
        eng.ingest_many("payments", [1, 2, 3], cols)
    assert e.value.index == 0 and e.value.field == "merchant"
    assert eng.positions()["payments"] == 1
    eng.close()


def _mixed_keys(n: int) -> tuple[list[int], list[dict]]:
    """Rows keyed by 1, 1.0, True and strings, spaced so 5-minute windows evict mid-batch."""
    keys = [1, 1.0, True, "1", "a"]
    ts, rows, t = [], [], 1_000_000
    for i in range(n):
        t += (0, 20_000, 61_000, 140_000)[i % 4]
        ts.append(t if i % 37 else t - 5_000)  # now and then late: clamped as ingest does
        rows.append({"card": keys[i % 5], "merchant": keys[(i * 3) % 5],
                     "channel": "cnp" if i % 3 else "cp", "amount": (i * 7919) % 10_000})
    return ts, rows


def test_a_batch_across_chunks_and_windows_with_mixed_keys(tmp_path):
    ts, rows = _mixed_keys(900)  # ~40 events a 2 KiB chunk: the batch spans many chunks
    ref = _engine(tmp_path / "ref")
    want = [ref.ingest("payments", ev, t) for t, ev in zip(ts, rows, strict=True)]
    ref_digest = ref.digest()
    ref.close()
    eng = _engine(tmp_path / "b")
    cols = {f: np.array([r[f] for r in rows], dtype=object) for f in rows[0]}
    out = eng.ingest_many("payments", np.array(ts, dtype=np.int64), cols)
    for name in want[0]:
        assert [(type(v), v) for v in out[name]] == [(type(w[name]), w[name]) for w in want]
    assert eng.digest() == ref_digest
    # 1 and 1.0 are one group, True another, "1" a third.
    assert eng.query("n5", 1, ts[-1]) == eng.query("n5", 1.0, ts[-1])
    eng.close()


def test_a_refused_row_rejects_the_whole_batch(tmp_path):
    ts, rows = _mixed_keys(300)
    eng = _engine(tmp_path / "e")
    eng.ingest_many("payments", ts[:100], {f: [r[f] for r in rows[:100]] for f in rows[0]})
    before = (eng.digest(), eng.positions())
    bad = [dict(r) for r in rows[100:]]
    bad[150]["card"] = {"not": "a key"}
    with pytest.raises(MetricInputError) as e:
        eng.ingest_many("payments", ts[100:], {f: [r[f] for r in bad] for f in rows[0]})
    assert e.value.index == 150 and e.value.field == "card"
    assert (eng.digest(), eng.positions()) == before  # nothing of the batch went in
    out = eng.ingest_many("payments", ts[100:], {f: [r[f] for r in rows[100:]] for f in rows[0]})
    ref = _engine(tmp_path / "ref")
    want = [ref.ingest("payments", ev, t) for t, ev in zip(ts, rows, strict=True)][100:]
    assert out["s5"] == [w["s5"] for w in want]
    assert eng.digest() == ref.digest()
    ref.close()
    eng.close()


@pytest.mark.parametrize("arr", [
    pa.array([1, -2, 3], pa.int8()), pa.array([1, 2], pa.uint64()), pa.array([1.5, 2.0]),
    pa.array([0.25, 1.0], pa.float32()), pa.array([True, False]), pa.array([1, None, 3]),
    pa.array(["a", None, "b"]), pa.array(["x"], pa.large_string()),
    pa.chunked_array([["a", "b"], [None]]), pa.array([1.5, None]), pa.array([[1], [2]]),
])
def test_arrow_columns_become_the_values_to_pylist_gives(arr):
    from metrics_engine.plan import arrow_values

    got, want = arrow_values(arr), arr.to_pylist()
    assert [(type(v), v) for v in got] == [(type(v), v) for v in want]
