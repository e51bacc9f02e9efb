"""When the checkpointer captures, what it skips, and that failures stay out of the apply loop."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from checkpoints import (
    Checkpointer,
    InvariantViolation,
    bootstrap,
    list_offsets,
    read_manifest,
)
from checkpoints.stores.local import LocalStore

from .helpers import BlobStateMachine, GatedStore


def _run(cp: Checkpointer, sm: BlobStateMachine, offsets: range, wait: bool = True) -> list[int]:
    taken = []
    for offset in offsets:
        sm.set(offset, "s.bin", str(offset).encode())
        if cp.maybe_checkpoint(offset, writer_id=1):
            taken.append(offset)
            if wait:
                cp.wait(timeout_s=60)
    return taken


def test_captures_when_crossing_a_multiple_of_every_entries(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    sm = BlobStateMachine()
    cp = Checkpointer(store, sm, every_entries=10, retain=10)
    assert _run(cp, sm, range(0, 35)) == [10, 20, 30]
    cp.close()
    assert list_offsets(store) == [30, 20, 10]
    assert cp.stats.taken == 3 and len(cp.stats.pauses_s) == 3


def test_the_same_offsets_on_a_node_that_starts_mid_log(tmp_path: Path) -> None:
    # A node restored at 14 checkpoints at the same offsets as one that started at 0.
    sm = BlobStateMachine()
    cp = Checkpointer(LocalStore(tmp_path / "s"), sm, every_entries=10, retain=10)
    assert _run(cp, sm, range(14, 41)) == [20, 30, 40]
    cp.close()


def test_gaps_in_offsets_still_cross_boundaries(tmp_path: Path) -> None:
    sm = BlobStateMachine()
    cp = Checkpointer(LocalStore(tmp_path / "s"), sm, every_entries=10, retain=10)
    assert _run(cp, sm, range(0, 60, 7)) == [14, 21, 35, 42, 56]
    cp.close()


def test_a_boundary_crossed_while_uploading_is_skipped(tmp_path: Path, caplog) -> None:
    store = GatedStore(LocalStore(tmp_path / "s"))
    store.gate.clear()
    sm = BlobStateMachine()
    cp = Checkpointer(store, sm, every_entries=10, retain=10)
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert _run(cp, sm, range(0, 25), wait=False) == [10]
    assert cp.stats.skipped_busy == 1
    store.gate.set()
    cp.wait(timeout_s=60)
    assert _run(cp, sm, range(25, 31)) == [30]
    cp.close()
    assert list_offsets(store) == [30, 10]
    assert any("still uploading" in r.message for r in caplog.records)


def test_a_failed_upload_never_raises_into_apply(tmp_path: Path, caplog) -> None:
    store = GatedStore(LocalStore(tmp_path / "s"))
    store.fail.set()
    sm = BlobStateMachine()
    cp = Checkpointer(store, sm, every_entries=10, retain=10)
    with caplog.at_level(logging.ERROR, logger="checkpoints"):
        taken = []
        for offset in range(0, 12):
            sm.set(offset, "s.bin", b"x")
            if cp.maybe_checkpoint(offset, 1):
                taken.append(offset)
                with pytest.raises(OSError):
                    cp.wait(timeout_s=60)
    assert taken == [10] and cp.stats.failed == 1
    assert list_offsets(store) == []  # parts never written; no manifest anywhere
    assert any("checkpoint at offset 10" in r.message for r in caplog.records)
    store.fail.clear()
    assert _run(cp, sm, range(12, 21)) == [20]
    cp.close()
    restored = BlobStateMachine()
    assert bootstrap(store, restored, scratch_root=tmp_path) == 20


def test_capture_at_an_offset_the_state_is_not_at_is_a_bug(tmp_path: Path) -> None:
    sm = BlobStateMachine()
    sm.set(5, "s.bin", b"5")
    cp = Checkpointer(LocalStore(tmp_path / "s"), sm, every_entries=10, retain=2)
    with pytest.raises(InvariantViolation):
        cp.checkpoint(4, writer_id=1)
    cp.close()


def test_an_offset_already_checkpointed_by_another_node_is_not_rewritten(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    sm = BlobStateMachine()
    sm.set(10, "s.bin", b"10")
    first = Checkpointer(store, sm, every_entries=10, retain=2, node_id="leader")
    assert first.checkpoint(10, 1).result(timeout=60) is not None
    written: list[Path] = []

    class Recording(BlobStateMachine):
        def snapshot(self):  # type: ignore[no-untyped-def]
            inner = super().snapshot()
            outer_write = inner.write

            def write(dir: Path) -> None:
                written.append(dir)
                outer_write(dir)

            inner.write = write  # type: ignore[method-assign]
            return inner

    follower_sm = Recording()
    follower_sm.set(10, "s.bin", b"10")
    second = Checkpointer(store, follower_sm, every_entries=10, retain=2, node_id="follower")
    assert second.checkpoint(10, 1).result(timeout=60) is None
    assert second.stats.skipped_existing == 1
    # The writer still ran, since writing is what releases a captured view.
    assert len(written) == 1 and read_manifest(store, 10).writer_node == "leader"
    first.close(), second.close()


@pytest.mark.parametrize("every, retain", [(0, 1), (10, 0)])
def test_limits_are_checked(tmp_path: Path, every: int, retain: int) -> None:
    with pytest.raises(ValueError):
        Checkpointer(LocalStore(tmp_path), BlobStateMachine(), every_entries=every, retain=retain)


def test_after_close_the_apply_loop_is_left_alone(tmp_path: Path) -> None:
    sm = BlobStateMachine()
    cp = Checkpointer(LocalStore(tmp_path / "s"), sm, every_entries=10, retain=2)
    cp.close()
    assert _run(cp, sm, range(0, 25)) == []


class _ViewWriter:
    """A writer that holds a view: it can give its digest and release the view unwritten."""

    def __init__(self, sm: BlobStateMachine, log: list[str]) -> None:
        self.inner, self.sm, self.log = BlobStateMachine.snapshot(sm), sm, log

    def write(self, dir: Path) -> None:
        self.log.append("write")
        self.inner.write(dir)

    def digest(self) -> str:
        self.log.append("digest")
        return self.sm.digest()

    def close(self) -> None:
        self.log.append("close")


class _ViewStateMachine(BlobStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def snapshot(self) -> _ViewWriter:  # type: ignore[override]
        return _ViewWriter(self, self.log)


def test_a_node_that_finds_the_offset_written_dumps_nothing_and_compares(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    first_sm, second_sm = _ViewStateMachine(), _ViewStateMachine()
    for sm, data in ((first_sm, b"10"), (second_sm, b"other")):
        sm.set(10, "s.bin", data)
    first = Checkpointer(store, first_sm, every_entries=10, retain=2, node_id="first")
    assert first.checkpoint(10, 1).result(timeout=60) is not None
    assert first_sm.log == ["write", "digest", "close"]
    mismatches: list[int] = []
    second = Checkpointer(store, second_sm, every_entries=10, retain=2, node_id="second",
                          on_mismatch=lambda offset, *_: mismatches.append(offset))
    assert second.checkpoint(10, 1).result(timeout=60) is None
    assert second_sm.log == ["digest", "close"]  # no dump, the view released
    assert second.stats.skipped_existing == 1 and second.digests[10] == second_sm.digest()
    assert mismatches == [10] and second.stats.digest_mismatches == 1  # states differ
    first.close(), second.close()


def test_a_delayed_write_looks_for_another_nodes_checkpoint_after_its_delay(
        tmp_path: Path) -> None:
    # Both capture offset 10 at once; the delayed one looks only after the other wrote.
    store = LocalStore(tmp_path / "s")
    first_sm, late_sm = _ViewStateMachine(), _ViewStateMachine()
    for sm in (first_sm, late_sm):
        sm.set(10, "s.bin", b"10")
    late = Checkpointer(store, late_sm, every_entries=10, retain=2, node_id="late",
                        write_delay_s=3600)
    pending = late.checkpoint(10, 1)
    first = Checkpointer(store, first_sm, every_entries=10, retain=2, node_id="first")
    assert first.checkpoint(10, 1).result(timeout=60) is not None
    assert not pending.done() and late_sm.log == []  # still waiting out its delay
    late.close(timeout_s=60)  # closing cuts the delay short
    assert pending.result(timeout=0) is None
    assert late_sm.log == ["digest", "close"] and late.stats.digest_mismatches == 0
    assert read_manifest(store, 10).writer_node == "first"
    first.close()
