"""Kill the engine mid-stream, reopen, re-feed from the last durable position: same values."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from metrics_engine.engine import FORMATS_READ, Engine
from metrics_engine.errors import InvariantViolation

from .streams import METRICS, events

N = 3000
KILL_AFTER = 2200
ENGINE_OPTS = dict(chunk_bytes_target=2048, segment_bytes_max=16 * 1024)

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from metrics_engine.engine import Engine
    from tests.metrics_engine.streams import METRICS, events
    eng = Engine({data!r}, chunk_bytes_target=2048, segment_bytes_max=16 * 1024)
    for m in METRICS:
        eng.define(m)
    for i, (t, ev) in enumerate(events({n}, 11)):
        eng.ingest("payments", ev, t)
        if i + 1 == {kill} // 2:  # some chunks surely durable, however slow fsync is
            eng.sync()
        if i + 1 == {kill}:
            os.kill(os.getpid(), signal.SIGKILL)
""")


def _reference(tmp: Path) -> tuple[list[dict], str]:
    eng = Engine(tmp / "ref", fsync=False, **ENGINE_OPTS)
    for m in METRICS:
        eng.define(m)
    values = [eng.ingest("payments", ev, t) for t, ev in events(N, 11)]
    digest = eng.digest()
    eng.close()
    return values, digest


def test_kill_reopen_refeed_gives_identical_values(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    data = tmp_path / "crashed"
    code = CHILD.format(root=root, data=str(data), n=N, kill=KILL_AFTER)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    want, want_digest = _reference(tmp_path)

    eng = Engine(data, **ENGINE_OPTS)
    durable = eng.durable_positions()["payments"]
    assert 0 < durable <= KILL_AFTER
    assert [m.name for m in eng.metrics()] == [n for m in METRICS for n in _names(m)]
    got = [eng.ingest("payments", ev, t) for t, ev in events(N, 11)[durable:]]
    assert got == want[durable:]
    assert eng.digest() == want_digest
    eng.close()


def test_clean_close_and_reopen_continues_exactly(tmp_path):
    want, want_digest = _reference(tmp_path)
    stream = events(N, 11)
    eng = Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    for m in METRICS:
        eng.define(m)
    got = [eng.ingest("payments", ev, t) for t, ev in stream[:1234]]
    eng.close()
    eng = Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    assert eng.positions()["payments"] == 1234
    got += [eng.ingest("payments", ev, t) for t, ev in stream[1234:]]
    assert got == want
    assert eng.digest() == want_digest
    eng.close()


def test_snapshot_restore_on_another_engine_then_replay(tmp_path):
    want, want_digest = _reference(tmp_path)
    stream = events(N, 11)
    a = Engine(tmp_path / "a", fsync=False, **ENGINE_OPTS)
    for m in METRICS:
        a.define(m)
    for t, ev in stream[:1500]:
        a.ingest("payments", ev, t)
    a.snapshot(tmp_path / "snap")
    digest_at_snapshot = a.digest()
    b = Engine(tmp_path / "b", fsync=False, **ENGINE_OPTS)
    b.restore(tmp_path / "snap")
    assert b.digest() == digest_at_snapshot
    got_b = [b.ingest("payments", ev, t) for t, ev in stream[1500:]]
    got_a = [a.ingest("payments", ev, t) for t, ev in stream[1500:]]
    assert got_a == got_b == want[1500:]
    assert a.digest() == b.digest() == want_digest
    a.close()
    b.close()


def test_small_cache_spills_to_rocksdb_without_changing_values(tmp_path):
    want, want_digest = _reference(tmp_path)
    eng = Engine(tmp_path / "small", fsync=False, cache_entries_max=64, **ENGINE_OPTS)
    for m in METRICS:
        eng.define(m)
    got = [eng.ingest("payments", ev, t) for t, ev in events(N, 11)]
    assert got == want
    assert eng.digest() == want_digest
    eng.close()


def test_old_segments_are_deleted(tmp_path):
    eng = Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    eng.define(METRICS[0])  # 5 minutes only
    for t, ev in events(N, 11):
        eng.ingest("payments", ev, t)
    eng.sync()
    eng.ingest("payments", {"card": "c1", "amount": 1}, events(N, 11)[-1][0] + 1)
    segments = list((tmp_path / "e" / "reservoir" / "payments").glob("seg-*.rfs"))
    total = sum(p.stat().st_size for p in segments)
    # Three thousand events span days; five minutes of them fit in a couple of segments.
    assert len(segments) <= 3, [p.name for p in segments]
    assert total <= 3 * 16 * 1024
    eng.close()


def _names(text):
    from metrics_engine.language import parse
    return [d.name for d in parse(text)]


def test_old_segments_are_deleted_when_the_writer_lags(tmp_path):
    """A writer behind ingest (a quiet, fast machine) must still delete every passed segment."""
    eng = Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    eng.define(METRICS[0])
    eng._writer.pause(True)
    stream = events(N, 11)
    for t, ev in stream[:N // 2]:
        eng.ingest("payments", ev, t)  # every chunk closes while nothing is durable yet
    assert eng.durable_positions()["payments"] == 0
    eng._writer.pause(False)
    for t, ev in stream[N // 2:]:
        eng.ingest("payments", ev, t)
    eng.sync()
    segments = list((tmp_path / "e" / "reservoir" / "payments").glob("seg-*.rfs"))
    assert len(segments) <= 3, [p.name for p in segments]
    eng.close()


def test_history_read_back_from_disk_keeps_64_bit_integers(tmp_path):
    """Events go to disk as JSON written natively; a state added after a reopen is filled
    from those chunks, so every integer (the 64-bit extremes, negatives, zero) and every
    timestamp must read back exactly."""
    ints = [-2**63, 2**63 - 1, 0, -1, 9, 10, -10, 123456789, -(10**18), 10**18 + 7]
    opts = dict(chunk_bytes_target=64, segment_bytes_max=256, fsync=False)
    eng = Engine(tmp_path / "e", **opts)
    eng.define("SELECT COUNT(*) AS n FROM s RANGE 1 DAYS")  # its head keeps every event
    t0 = 1_700_000_000_000
    for i, v in enumerate(ints):
        eng.ingest("s", {"v": v}, t0 + i)
    eng.close()
    eng = Engine(tmp_path / "e", **opts)
    eng.define("SELECT MIN(v) AS lo, MAX(v) AS hi, SUM(v) AS total FROM s RANGE 1 DAYS")
    out = eng.ingest("s", {"v": 0}, t0 + len(ints) + 5)
    eng.close()
    assert out["n"] == len(ints) + 1
    assert (out["lo"], out["hi"], out["total"]) == (-2**63, 2**63 - 1, sum(ints))


def _set_format(path: Path, version: int) -> None:
    meta = orjson.loads(path.read_bytes())
    meta["version"] = version
    path.write_bytes(orjson.dumps(meta))


def test_an_older_format_is_refused_not_read(tmp_path):
    eng = Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    for m in METRICS:
        eng.define(m)
    for t, ev in events(300, 11):
        eng.ingest("payments", ev, t)
    eng.snapshot(tmp_path / "snap")
    eng.close()
    for where in (tmp_path / "e", tmp_path / "snap"):
        _set_format(where / "engine.json", min(FORMATS_READ) - 1)
    with pytest.raises(InvariantViolation, match=f"format {min(FORMATS_READ) - 1}, this engine "
                                                 f"reads formats 4, 5 only"):
        Engine(tmp_path / "e", fsync=False, **ENGINE_OPTS)
    # A refused snapshot leaves the engine it was to replace as it was.
    other = Engine(tmp_path / "other", fsync=False, **ENGINE_OPTS)
    other.define(METRICS[0])
    other.ingest("payments", events(1, 3)[0][1], events(1, 3)[0][0])
    before = other.digest()
    with pytest.raises(InvariantViolation, match="engine format"):
        other.restore(tmp_path / "snap")
    assert other.digest() == before
    other.close()
