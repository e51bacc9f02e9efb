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
