"""The state machine's snapshot with the engine's in-memory capture equals the one taken with
the engine's whole snapshot on the apply thread (``snapshot.ENGINE_CAPTURE = False``), even
when orders are applied between the capture and the write."""

from __future__ import annotations

import itertools

from metrics_engine import Engine
from runner.state import entries, snapshot
from runner.state.machine import RunnerStateMachine
from tests.runner.test_machine import T0, Log, order, setup_w3

SMALL = dict(chunk_bytes_target=2048, segment_bytes_max=8192)


def _files(d) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_capture_and_blocking_snapshot_restore_the_same_state(tmp_path, monkeypatch):
    # Small chunks and segments: the capture meets closed chunks, rolled segments and trims.
    a, b = (RunnerStateMachine(tmp_path / n, engine=Engine(tmp_path / f"{n}-engine", **SMALL))
            for n in "ab")
    log = Log(a, b)
    setup_w3(log)
    for i in range(400):  # enough for the engine to close chunks
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 7}", amount=10 + i),
                  ts=T0 + i * 1000)
    (stream,) = a.engine._plan.streams.values()
    assert stream.res.chunks, "no closed chunk: a weak test"
    new = a.snapshot()
    monkeypatch.setattr(snapshot, "ENGINE_CAPTURE", False)
    old = b.snapshot()
    monkeypatch.setattr(snapshot, "ENGINE_CAPTURE", True)
    after = Log(a)
    after.offsets = itertools.count(a.applied_offset + 1)
    for i in range(400, 700):  # applied between a's capture and its write
        after.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 7}"), ts=T0 + i * 1000)
    new.write(tmp_path / "new")
    old.write(tmp_path / "old")
    assert new.digest() == old.digest()
    new.close()
    old.close()
    assert _files(tmp_path / "new" / "metrics") == _files(tmp_path / "old" / "metrics")

    c, d = RunnerStateMachine(tmp_path / "c"), RunnerStateMachine(tmp_path / "d")
    c.restore(tmp_path / "new")
    d.restore(tmp_path / "old")
    assert c.digest() == d.digest() == b.digest()
    more = Log(c, d)
    more.offsets = itertools.count(c.applied_offset + 1)
    for i in range(700, 800):
        more.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 7}"), ts=T0 + i * 1000)
    assert c.digest() == d.digest()
    assert c.engine.query("card_count_5m", "c3", T0 + 800_000) == \
        d.engine.query("card_count_5m", "c3", T0 + 800_000) > 0
    for m in (a, b, c, d):
        m.close()
