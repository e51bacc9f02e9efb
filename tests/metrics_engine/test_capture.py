"""``Engine.capture``: the snapshot's state taken in memory, its files made later elsewhere.

What a capture writes must be what ``snapshot_blocking`` (everything on the caller's thread)
writes at the same point, file for file, even when events are ingested, chunks closed and old
segments trimmed between the capture and its write, and while chunks closed before the capture
still wait in the writer's queue; the capturing thread opens, links or writes no file; a capture
never written leaves nothing behind and does not hold trim back."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from metrics_engine.engine import CAPTURES_DIR, Engine

from .streams import METRICS, events

OPTS = dict(chunk_bytes_target=1024, segment_bytes_max=4096)
SHORT = ["SELECT SUM(amount) AS s, COUNT(*) AS n FROM payments GROUP BY card RANGE 5 MINUTES",
         "SELECT MAX(amount) AS mx FROM refunds GROUP BY card RANGE 10 MINUTES"]
N, AT, AFTER = 1200, 700, 400


def _engine(path: Path, texts: list[str]) -> Engine:
    eng = Engine(path, fsync=False, **OPTS)
    for t in texts:
        eng.define(t)
    return eng


def _feed(eng: Engine, evs: list) -> list[dict]:
    out = []
    for t, ev in evs:
        out.append(eng.ingest("payments", ev, t))
        if ev["id"] % 3 == 0:
            out.append(eng.ingest("refunds", ev, t))
    return out


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _segments(eng: Engine) -> set[str]:
    return {p.name for p in (eng.data_dir / "reservoir").rglob("seg-*.rfs")}


@pytest.mark.parametrize("texts", [METRICS + SHORT[1:], SHORT], ids=["w1", "trimming"])
def test_a_capture_writes_what_the_blocking_snapshot_writes_at_its_point(tmp_path, texts):
    evs = events(N, 5)
    ref = _engine(tmp_path / "ref", texts)
    _feed(ref, evs[:AT])
    ref.snapshot_blocking(tmp_path / "blocking")
    ref_segments = _segments(ref)
    ref.close()

    eng = _engine(tmp_path / "live", texts)
    _feed(eng, evs[:AT - 150])
    eng._writer.pause(True)  # chunks closed from here on wait in the writer's queue
    _feed(eng, evs[AT - 150:AT])
    cap = eng.capture()
    staging = eng.data_dir / CAPTURES_DIR
    assert not staging.exists(), "the capturing thread made files"
    # After the capture: more events (chunks close), trims, segments rolled and deleted.
    later = _feed(eng, evs[AT:AT + AFTER])
    eng._writer.pause(False)
    eng.sync()
    if texts is SHORT:
        assert ref_segments - _segments(eng), "the test must see captured segments trimmed"
    cap.write(tmp_path / "captured")
    cap.close()
    assert _files(tmp_path / "captured") == _files(tmp_path / "blocking")
    assert not any(staging.iterdir())

    # Both restore to the same state, which goes on as the live engine went on.
    for name in ("captured", "blocking"):
        back = Engine(tmp_path / f"back-{name}", fsync=False, **OPTS)
        back.restore(tmp_path / name)
        assert _feed(back, evs[AT:AT + AFTER]) == later
        back.close()
    eng.close()


def test_snapshot_is_capture_then_write(tmp_path):
    evs = events(600, 9)
    a, b = _engine(tmp_path / "a", METRICS), _engine(tmp_path / "b", METRICS)
    _feed(a, evs)
    _feed(b, evs)
    a.snapshot(tmp_path / "sa")
    b.snapshot_blocking(tmp_path / "sb")
    assert _files(tmp_path / "sa") == _files(tmp_path / "sb")
    with pytest.raises(ValueError, match="not empty"):
        a.snapshot(tmp_path / "sa")
    a.close()
    b.close()


FILE_EVENTS = {"open", "os.link", "os.mkdir", "os.rename", "os.replace", "os.remove",
               "os.rmdir", "os.listdir", "os.scandir", "os.truncate", "shutil.copyfile",
               "shutil.move", "shutil.rmtree", "os.symlink", "os.chmod"}
_seen: list[tuple[int, str]] = []
_watching = threading.Event()


def _hook(event: str, _args: tuple) -> None:
    if _watching.is_set() and event in FILE_EVENTS:
        _seen.append((threading.get_ident(), event))


sys.addaudithook(_hook)


def _file_ops_on_this_thread(fn) -> list[str]:
    _seen.clear()
    _watching.set()
    try:
        result = fn()
    finally:
        _watching.clear()
    me = threading.get_ident()
    return result, [e for tid, e in _seen if tid == me]


def test_the_capturing_thread_does_no_file_operation(tmp_path):
    eng = _engine(tmp_path / "e", METRICS + SHORT[1:])
    _feed(eng, events(800, 3))
    _, blocking = _file_ops_on_this_thread(lambda: eng.snapshot_blocking(tmp_path / "old"))
    assert {"open", "os.rename", "os.link"} <= set(blocking)  # the hook sees the old path's files
    _feed(eng, events(50, 4))
    cap, ops = _file_ops_on_this_thread(eng.capture)
    assert ops == []
    cap.write(tmp_path / "new")
    cap.close()
    eng.close()


def test_a_capture_never_written_leaves_nothing_and_holds_no_trim(tmp_path):
    evs = events(N, 6)
    eng = _engine(tmp_path / "e", SHORT)
    _feed(eng, evs[:AT])
    eng.sync()
    at_capture = _segments(eng)
    cap = eng.capture()
    _feed(eng, evs[AT:])
    eng.sync()
    trimmed = at_capture - _segments(eng)
    assert trimmed, "segments of the capture's time were trimmed from the engine"
    captures = eng.data_dir / CAPTURES_DIR
    assert trimmed & {p.name for p in captures.rglob("seg-*.rfs")}  # the links keep them
    cap.close()
    assert list(captures.rglob("*")) == []
    cap.close()  # twice: nothing more

    # Not even closed: the engine's close, or its reopening after a crash, drops the links.
    eng.capture()
    eng.close()
    assert not captures.exists()
    eng = Engine(tmp_path / "e", fsync=False, **OPTS)
    eng.capture()
    eng._writer.barrier()
    assert any(captures.rglob("seg-*.rfs"))
    eng._writer.stop()  # as a crash: nothing cleaned
    assert captures.exists()
    Engine(tmp_path / "e", fsync=False, **OPTS).close()
    assert not captures.exists()


def test_a_capture_is_written_once(tmp_path):
    eng = _engine(tmp_path / "e", SHORT)
    _feed(eng, events(100, 2))
    cap = eng.capture()
    cap.write(tmp_path / "one")
    with pytest.raises(Exception, match="already written"):
        cap.write(tmp_path / "two")
    eng.close()
