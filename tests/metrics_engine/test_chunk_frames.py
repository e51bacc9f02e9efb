"""A chunk that a batch of typed columns fills whole is stored as a columnar frame (record
magic ``RFC2``, native ``frame.rs``) instead of a JSON array (``RFC1``). It must read back to
the very events the JSON gives (every type, nulls, NaN and infinities, strings needing
escapes), close where the JSON chunk closes, give JSON's exact bytes when written as JSON (a
reader of the open chunk mid-batch), and JSON segments written before must keep reading beside
it, from disk and from memory-only reservoirs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest
import zstandard
from railflow_metrics_native import columns_json, decode_columns

from metrics_engine import Engine, MetricInputError
from metrics_engine.language import parse
from metrics_engine.plan import Plan, scan
from metrics_engine.reservoir import HEADER, MAGIC, MAGIC_COLUMNS, StreamReservoir

OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=16 * 1024)
T0 = 1_700_000_000_000
# Its head keeps every event in the reservoir (nothing is trimmed).
METRIC = ("SELECT SUM(amount) AS s, COUNT(*) AS n, MAX(score) AS mx, RECENT(note) AS rn "
          "FROM payments GROUP BY card RANGE 1000 DAYS")
NOTES = ['a"b', "c\\d", "e\nf", "tab\there", "\x01ctl", "ключ", "😀", "", "plain", "\x7f"]
SCORES = [math.nan, math.inf, -math.inf, -0.0, 0.1, 1e300, 5e-324, 1.0, -2.5e-7, 123456.789]


def _table(n: int, seed: int, t0: int) -> tuple[np.ndarray, pa.Table]:
    """Every typed column kind, with nulls; now and then a late timestamp (clamped)."""
    rng = np.random.default_rng(seed)
    ts = t0 + np.cumsum(rng.choice([0, 7, 1_000, 61_000], n)).astype(np.int64)
    ts[::37] -= 5_000
    idx = rng.integers(0, 10, n)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64) + seed * 1_000_000),
        "card": pa.array([None if i % 23 == 0 else f"c{int(x)}" for i, x in
                          enumerate(rng.integers(0, 9, n))], pa.string()),
        "note": pa.array([NOTES[i] for i in idx], pa.string()),
        "amount": pa.array([None if i % 17 == 0 else int(x) for i, x in
                            enumerate(rng.integers(-500, 50_000, n))], pa.int64()),
        "big": pa.array([[-(1 << 63), (1 << 63) - 1, 0, -1][i % 4] for i in range(n)],
                        pa.int64()),
        "score": pa.array([None if i % 19 == 0 else SCORES[int(x)] for i, x in enumerate(idx)],
                          pa.float64()),
        "flag": pa.array([None if i % 11 == 0 else bool(i % 3) for i in range(n)], pa.bool_()),
        "nothing": pa.nulls(n),
    })
    return ts, table


def _same_values(a: list, b: list) -> bool:
    """Equal in value and type (NaN equal to NaN)."""
    def norm(v):
        return ("nan",) if isinstance(v, float) and math.isnan(v) else (type(v), v)
    return [norm(x) for x in a] == [norm(x) for x in b]


def _records(root: Path) -> list[tuple[bytes, int, int, bytes]]:
    """(magic, first position, count, uncompressed payload) of every record on disk."""
    out = []
    for path in sorted((root / "reservoir" / "payments").glob("seg-*.rfs")):
        data = path.read_bytes()
        off = 0
        while off < len(data):
            magic, first, count, size, _crc = HEADER.unpack_from(data, off)
            payload = data[off + HEADER.size:off + HEADER.size + size]
            out.append((magic, first, count, zstandard.ZstdDecompressor().decompress(payload)))
            off += HEADER.size + size
    return out


def _events(eng: Engine) -> list:
    res = eng._plan.streams["payments"].res
    return [[t, ev] for _pos, t, ev in scan(res, res.first_pos(), res.next_pos)]


def _feed(tmp: Path, batches, *, batched: bool, columnar: bool = True):
    eng = Engine(tmp, **OPTS)
    eng.define(METRIC)
    eng._plan.streams["payments"].core.columnar = columnar
    got: dict[str, list] = {}
    for ts, table in batches:
        if batched:
            for k, v in eng.ingest_many("payments", ts, table).items():
                got.setdefault(k, []).extend(v)
        else:
            for t, ev in zip(ts.tolist(), table.to_pylist(), strict=True):
                for k, v in eng.ingest("payments", ev, t).items():
                    got.setdefault(k, []).append(v)
    return eng, got


def test_batched_chunks_are_frames_that_read_back_as_their_json(tmp_path):
    batches = [_table(n, seed, T0 + seed * 10**9) for seed, n in enumerate([700, 1, 450, 900])]
    one, want = _feed(tmp_path / "one", batches, batched=False)
    many, got = _feed(tmp_path / "many", batches, batched=True)
    for name in want:
        assert _same_values(got[name], want[name]), name
    assert many.digest() == one.digest()
    one.sync()
    many.sync()
    # The same chunks: a row's JSON length is counted without writing it.
    chunks = [[(c.first_pos, c.count) for c in e._plan.streams["payments"].res.chunks]
              for e in (one, many)]
    assert chunks[0] == chunks[1] and len(chunks[0]) > 20
    # Read back (chunks on disk, the open chunk in memory): the same events.
    assert orjson.dumps(_events(many)) == orjson.dumps(_events(one))
    one.close()
    many.close()
    json_records = {(f, c): p for m, f, c, p in _records(tmp_path / "one")}
    assert {m for m, *_ in _records(tmp_path / "one")} == {MAGIC}
    frames = [(f, c, p) for m, f, c, p in _records(tmp_path / "many") if m == MAGIC_COLUMNS]
    # Every chunk a batch filled whole is a frame (the others end or begin outside a batch).
    assert len(frames) >= len(chunks[0]) - 2 * len(batches)
    for first, count, frame in frames:
        json = json_records[(first, count)]
        # Its rows as JSON are the JSON chunk's very bytes; decoded, the JSON's rows.
        assert columns_json(frame) == json
        assert orjson.dumps(decode_columns(frame)) == orjson.dumps(orjson.loads(json))
        assert len(frame) < len(json) * 0.7
    # Reopened, every event comes back from the segments.
    one, many = Engine(tmp_path / "one", **OPTS), Engine(tmp_path / "many", **OPTS)
    assert orjson.dumps(_events(many)) == orjson.dumps(_events(one))
    assert many.digest() == one.digest()
    # And both carry on alike.
    ts, table = _table(300, 9, T0 + 9 * 10**9)
    a = many.ingest_many("payments", ts, table)
    b = [one.ingest("payments", ev, t) for t, ev in zip(ts.tolist(), table.to_pylist(),
                                                         strict=True)]
    for name in a:
        assert _same_values(a[name], [x[name] for x in b]), name
    assert many.digest() == one.digest()
    one.close()
    many.close()


def test_json_segments_written_before_read_beside_frames(tmp_path):
    """A stream whose older chunks are JSON (events one by one, or batches with frames off:
    what every engine wrote before frames) and newer ones frames reads back whole, and a
    metric added later fills from both kinds of record."""
    parts = [_table(n, seed, T0 + seed * 10**9) for seed, n in enumerate([600, 800, 500])]
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define(METRIC)
    core = eng._plan.streams["payments"].core
    ts, table = parts[0]
    for t, ev in zip(ts.tolist(), table.to_pylist(), strict=True):
        eng.ingest("payments", ev, t)
    core.columnar = False
    eng.ingest_many("payments", *parts[1])
    eng.close()
    assert {m for m, *_ in _records(tmp_path / "e")} == {MAGIC}
    eng = Engine(tmp_path / "e", **OPTS)
    eng.ingest_many("payments", *parts[2])
    eng.close()
    magics = [m for m, *_ in _records(tmp_path / "e")]
    assert MAGIC in magics and MAGIC_COLUMNS in magics
    eng = Engine(tmp_path / "e", **OPTS)
    want = [[t, ev] for ts, table in parts
            for t, ev in zip(ts.tolist(), table.to_pylist(), strict=True)]
    last = None
    for row in want:  # late times are clamped; NaN and infinities are kept as null
        if last is not None and row[0] < last:
            row[0] = last
        last = row[0]
        row[1] = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                  for k, v in row[1].items()}
    assert orjson.dumps(_events(eng)) == orjson.dumps(want)
    eng.define("SELECT SUM(big) AS sb, COUNT(flag) AS nfl FROM payments RANGE 1000 DAYS")
    out = eng.ingest("payments", {"big": 0, "flag": True}, want[-1][0])
    eng.close()
    assert out["sb"] == sum(ev["big"] for _, ev in want)
    assert out["nfl"] == sum(ev["flag"] is not None for _, ev in want) + 1


def test_memory_only_reservoir_reads_its_frames(tmp_path):
    """A memory-only reservoir (offline, partitions) keeps a closed frame in memory: a state
    added later is filled from it."""
    plan = Plan(lambda _stream: StreamReservoir(None, None, None, chunk_bytes_target=1024))
    for d in parse(METRIC):
        plan.add(d)
    ts, table = _table(1500, 4, T0)
    plan.ingest_many("payments", ts, table)
    sp = plan.streams["payments"]
    assert any(p[:1] != b"[" for p in sp.res._pending_json.values())
    for d in parse("SELECT SUM(big) AS sb FROM payments RANGE 1000 DAYS"):
        plan.add(d)
    out = plan.ingest("payments", {"big": 5}, int(ts.max()))
    assert out["sb"] == sum(table.column("big").to_pylist()) + 5
    rows = [[t, ev] for _p, t, ev in scan(sp.res, 0, 1500)]
    assert [ev["id"] for _t, ev in rows] == table.column("id").to_pylist()


@pytest.mark.parametrize("columnar", [True, False])
def test_a_string_that_is_not_utf8_is_refused_by_row_and_field(tmp_path, columnar):
    """A column no metric reads is still checked (a frame holds its bytes as they came)."""
    ts, table = _table(400, 2, T0)
    good = table.column("note").combine_chunks()
    offsets = np.frombuffer(good.buffers()[1], np.int32)[:len(good) + 1].copy()
    row = next(i for i in range(123, 400) if offsets[i + 1] > offsets[i])
    data = bytearray(good.buffers()[2].to_pybytes())
    data[offsets[row]:offsets[row + 1]] = b"\xff" * int(offsets[row + 1] - offsets[row])
    bad = pa.Array.from_buffers(pa.string(), len(good), [None, pa.py_buffer(offsets.tobytes()),
                                                         pa.py_buffer(bytes(data))])
    table = table.append_column("extra", bad)
    eng, _ = _feed(tmp_path / "e", [], batched=True, columnar=columnar)
    with pytest.raises(MetricInputError) as err:
        eng.ingest_many("payments", ts, table)
    assert err.value.field == "extra" and err.value.index == row
    assert eng.positions().get("payments", 0) == 0
    eng.close()
