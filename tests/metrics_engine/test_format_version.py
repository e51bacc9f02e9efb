"""The engine format a data directory or a snapshot says it holds (``engine.json``'s
``version``): format 5 may hold ``RFC2`` columnar frames, which an engine of format 4 would
take for a torn write and truncate. A directory or snapshot written now must say 5, so that
such an engine refuses it, leaving every byte in place; this engine reads format 4 (JSON
chunks only: the fixture of ``test_snapshot_compat``) and refuses formats it does not know."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from metrics_engine import engine as engine_mod
from metrics_engine import reservoir as reservoir_mod
from metrics_engine.engine import FORMAT_VERSION, FORMATS_READ, Engine
from metrics_engine.errors import InvariantViolation
from metrics_engine.reservoir import HEADER, MAGIC, MAGIC_COLUMNS

from .snapshot_fixture import FIXTURE, OPTS

T0 = 1_700_000_000_000
METRIC = "SELECT SUM(amount) AS s, COUNT(*) AS n FROM payments GROUP BY card RANGE 1000 DAYS"


def _version(root: Path) -> int:
    return orjson.loads((root / "engine.json").read_bytes())["version"]


def _magics(root: Path) -> set[bytes]:
    out = set()
    for path in (root / "reservoir" / "payments").glob("seg-*.rfs"):
        data, off = path.read_bytes(), 0
        while off < len(data):
            magic, _first, _count, size, _crc = HEADER.unpack_from(data, off)
            out.add(magic)
            off += HEADER.size + size
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _with_frames(tmp: Path) -> tuple[Path, Path]:
    """A closed data directory and a snapshot, both holding JSON chunks and frames."""
    eng = Engine(tmp / "data", **OPTS)
    eng.define(METRIC)
    for i in range(50):  # JSON chunks, event by event
        eng.ingest("payments", {"card": f"c{i % 7}", "amount": i}, T0 + i)
    n = 2_000  # then a batch of typed columns: frames
    eng.ingest_many("payments", T0 + 100 + np.arange(n, dtype=np.int64),
                    pa.table({"card": pa.array([f"c{i % 7}" for i in range(n)]),
                              "amount": pa.array(np.arange(n, dtype=np.int64))}))
    eng.snapshot(tmp / "snap")
    eng.close()
    return tmp / "data", tmp / "snap"


def _refused_untouched(tmp: Path, data: Path, snap: Path, match: str) -> None:
    """Opening ``data`` and restoring ``snap`` are both refused with ``match``, and neither
    changes a byte of either."""
    before = {root: _files(root) for root in (data, snap)}
    with pytest.raises(InvariantViolation, match=match):
        Engine(data, **OPTS)
    other = Engine(tmp / "other", **OPTS)
    with pytest.raises(InvariantViolation, match=match):
        other.restore(snap)
    other.close()
    assert {root: _files(root) for root in (data, snap)} == before


def test_a_directory_and_a_snapshot_holding_frames_say_format_5(tmp_path):
    data, snap = _with_frames(tmp_path)
    for root in (data, snap):
        assert _magics(root) == {MAGIC, MAGIC_COLUMNS}
        assert _version(root) == FORMAT_VERSION == 5


def test_an_engine_of_format_4_refuses_them_and_truncates_nothing(tmp_path, monkeypatch):
    data, snap = _with_frames(tmp_path)
    # The build before frames: it read format 4 only and took any record not ``RFC1`` for a
    # torn write (it truncated the segment there).
    monkeypatch.setattr(engine_mod, "FORMATS_READ", (4,))
    monkeypatch.setattr(reservoir_mod, "MAGIC_COLUMNS", MAGIC)
    _refused_untouched(tmp_path, data, snap, "engine format 5, this engine reads formats 4 only")


def test_a_format_4_directory_opens_and_says_5_from_then_on(tmp_path):
    assert 4 in FORMATS_READ
    data = tmp_path / "data"
    shutil.copytree(FIXTURE / "snapshot", data)
    assert _version(data) == 4 and _magics(data) == {MAGIC}
    eng = Engine(data, **OPTS)
    # Said before any frame can be written, so a crash after one leaves no format-4 claim.
    assert _version(data) == FORMAT_VERSION
    assert eng.digest() == orjson.loads((FIXTURE / "manifest.json").read_bytes())["digest"]
    eng.close()
    assert _version(data) == FORMAT_VERSION


@pytest.mark.parametrize("version", [min(FORMATS_READ) - 1, FORMAT_VERSION + 1, None])
def test_a_format_it_does_not_read_is_refused_untouched(tmp_path, version):
    data, snap = _with_frames(tmp_path)
    for root in (data, snap):
        meta = orjson.loads((root / "engine.json").read_bytes())
        meta["version"] = version
        (root / "engine.json").write_bytes(orjson.dumps(meta))
    _refused_untouched(tmp_path, data, snap,
                       f"engine format {version!r}, this engine reads formats 4, 5 only")
