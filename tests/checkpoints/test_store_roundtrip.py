"""Checkpoint, corrupt, retain and bootstrap on every store (local; S3 and HDFS on the cluster)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from checkpoints import (
    Checkpointer,
    CorruptCheckpoint,
    bootstrap,
    list_offsets,
    prune,
    read_manifest,
)
from checkpoints.layout import folder_name, manifest_key
from checkpoints.stores.s3 import S3Store
from checkpoints.testing import DuckStateMachine, event_entry

from .helpers import BlobStateMachine, GatedStore, flip_byte, part_keys


def _apply_events(sm: DuckStateMachine, start: int, stop: int) -> None:
    for i in range(start, stop):
        sm.apply(event_entry(i, f"evt-{i % 97}-{i}", amount=100 + i, score=(i * 37) % 100))


def _checkpoint(store, sm, retain: int = 5) -> int:  # type: ignore[no-untyped-def]
    cp = Checkpointer(store, sm, every_entries=1_000_000, retain=retain)
    try:
        manifest = cp.checkpoint(sm.applied_offset, writer_id=3).result(timeout=120)
    finally:
        cp.close()
    assert manifest is not None
    return manifest.offset


def test_round_trip_restores_the_digest_at_the_offset(store, tmp_path: Path) -> None:
    sm = DuckStateMachine()
    _apply_events(sm, 0, 120)
    digest_at_capture = sm.digest()
    cp = Checkpointer(store, sm, every_entries=1_000_000, retain=3, node_id="node-a")
    gated = GatedStore(store)
    cp.store = gated
    gated.gate.clear()
    fut = cp.checkpoint(119, writer_id=3)
    # Apply goes on while the upload is held: the checkpoint must still hold offset 119.
    assert gated.uploads_started.wait(timeout=60)
    _apply_events(sm, 120, 150)
    gated.gate.set()
    manifest = fut.result(timeout=120)
    cp.close()
    assert manifest.offset == 119 and manifest.writer_id == 3
    assert manifest.digest == digest_at_capture != sm.digest()
    assert list_offsets(store) == [119]

    restored = DuckStateMachine()
    assert bootstrap(store, restored, scratch_root=tmp_path) == 119
    assert restored.applied_offset == 119
    assert restored.digest() == digest_at_capture
    assert restored.count("runs") == 120 and restored.count("steps") == 240
    # The restored node goes on from offset + 1 and reaches the source's state.
    _apply_events(restored, 120, 150)
    assert restored.digest() == sm.digest()


def test_manifest_lists_each_part_with_size_and_sha256(store) -> None:
    sm = BlobStateMachine()
    sm.set(0, "a.bin", b"x" * 1000)
    sm.set(1, "nested/dir/b.bin", os.urandom(5000))
    offset = _checkpoint(store, sm)
    m = read_manifest(store, offset)
    sizes = {p.path.split("/", 1)[1]: p.size for p in m.parts}
    assert sizes == {"a.bin": 1000, "nested/dir/b.bin": 5000, "APPLIED": 1}
    assert all(len(p.sha256) == 64 for p in m.parts)
    assert m.digest == sm.digest() and m.total_bytes == 6001


def test_large_part_round_trips(store, tmp_path: Path) -> None:
    # Over the S3 multipart threshold, so S3 takes the multipart path.
    sm = BlobStateMachine()
    sm.set(0, "big.bin", os.urandom(40 * 1024 * 1024 + 123))
    _checkpoint(store, sm)
    restored = BlobStateMachine()
    assert bootstrap(store, restored, scratch_root=tmp_path) == 0
    assert restored.blobs["big.bin"] == sm.blobs["big.bin"]
    if isinstance(store, S3Store):  # a multipart upload's ETag is "<md5 of md5s>-<parts>"
        key = next(k for k in part_keys(store, 0) if k.endswith("big.bin"))
        etag = store._client.head_object(Bucket=store.bucket, Key=store._key(key))["ETag"]
        assert etag.strip('"').endswith("-3")


def _two_checkpoints(store) -> tuple[BlobStateMachine, str, str]:  # type: ignore[no-untyped-def]
    sm = BlobStateMachine()
    sm.set(10, "state.bin", b"old state " * 100)
    old = sm.digest()
    _checkpoint(store, sm)
    sm.set(20, "state.bin", b"new state " * 100)
    new = sm.digest()
    _checkpoint(store, sm)
    return sm, old, new


def test_flipped_byte_in_a_part_is_rejected(store, tmp_path: Path, caplog) -> None:
    _, old, _ = _two_checkpoints(store)
    key = next(k for k in part_keys(store, 20) if k.endswith("state.bin"))
    flip_byte(store, key, tmp_path, position=517)
    restored = BlobStateMachine()
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert bootstrap(store, restored, scratch_root=tmp_path) == 10
    assert restored.digest() == old
    assert any(
        "skipping checkpoint 20" in r.message and "sha256" in r.message for r in caplog.records
    )


def test_flipped_byte_in_the_manifest_is_rejected(store, tmp_path: Path, caplog) -> None:
    _, old, _ = _two_checkpoints(store)
    flip_byte(store, manifest_key(20), tmp_path, position=40)
    with pytest.raises(CorruptCheckpoint):
        read_manifest(store, 20)
    restored = BlobStateMachine()
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert bootstrap(store, restored, scratch_root=tmp_path) == 10
    assert restored.digest() == old
    assert any("skipping checkpoint 20" in r.message for r in caplog.records)


def test_missing_manifest_is_not_a_checkpoint(store, tmp_path: Path, caplog) -> None:
    _, old, _ = _two_checkpoints(store)
    store.delete_file(manifest_key(20))
    assert list_offsets(store) == [20, 10]  # the folder is there ...
    restored = BlobStateMachine()
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert bootstrap(store, restored, scratch_root=tmp_path) == 10  # ... but ignored
    assert restored.digest() == old
    assert any("no MANIFEST.json" in r.message for r in caplog.records)


def test_missing_part_is_rejected(store, tmp_path: Path) -> None:
    _two_checkpoints(store)
    key = next(k for k in part_keys(store, 20) if k.endswith("state.bin"))
    store.delete_file(key)
    assert bootstrap(store, BlobStateMachine(), scratch_root=tmp_path) == 10


def test_no_usable_checkpoint_means_replay_from_the_start(store, tmp_path: Path) -> None:
    assert bootstrap(store, BlobStateMachine(), scratch_root=tmp_path) is None
    _two_checkpoints(store)
    for offset in (10, 20):
        store.delete_file(manifest_key(offset))
    assert bootstrap(store, BlobStateMachine(), scratch_root=tmp_path) is None


def test_digest_mismatch_after_restore_is_rejected(store, tmp_path: Path) -> None:
    sm = BlobStateMachine()
    sm.set(5, "s.bin", b"five")
    _checkpoint(store, sm)

    class Lying(BlobStateMachine):
        def digest(self) -> str:
            return "not-the-digest"

    assert bootstrap(store, Lying(), scratch_root=tmp_path) is None
    assert bootstrap(store, Lying(), scratch_root=tmp_path, verify_digest=False) == 5


def test_a_checkpoint_the_state_machine_cannot_read_is_skipped(store, tmp_path: Path, caplog):
    _, old, _ = _two_checkpoints(store)

    class Picky(BlobStateMachine):
        def restore(self, dir: Path) -> None:
            super().restore(dir)
            if self.applied_offset == 20:
                raise ValueError("unknown snapshot format 9")

    restored = Picky()
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert bootstrap(store, restored, scratch_root=tmp_path) == 10
    assert restored.digest() == old
    assert any("unknown snapshot format 9" in r.message for r in caplog.records)


def test_retention_keeps_the_newest(store) -> None:
    sm = BlobStateMachine()
    for offset in (1, 2, 3, 4, 5):
        sm.set(offset, "s.bin", str(offset).encode())
        _checkpoint(store, sm, retain=2)
    assert list_offsets(store) == [5, 4]


def test_retention_never_deletes_the_newest_valid_one(store, tmp_path: Path) -> None:
    sm = BlobStateMachine()
    for offset in (1, 2, 3):
        sm.set(offset, "s.bin", str(offset).encode())
        _checkpoint(store, sm, retain=3)
    # A newer folder without a manifest (an upload in progress elsewhere) and a corrupt newest.
    store.put_bytes(f"{folder_name(9)}/parts-x/s.bin", b"partial")
    flip_byte(store, manifest_key(3), tmp_path, position=3)
    deleted = prune(store, retain=1)
    # 2 is the newest valid one: kept even with retain=1. Newer folders that are not valid
    # checkpoints (9 uploading, 3 damaged) stay until a newer valid checkpoint supersedes them.
    assert deleted == [1]
    assert list_offsets(store) == [9, 3, 2]
    assert bootstrap(store, BlobStateMachine(), scratch_root=tmp_path) == 2
    sm.set(10, "s.bin", b"10")
    _checkpoint(store, sm, retain=1)
    assert list_offsets(store) == [10]


def test_retention_drops_old_partial_folders(store) -> None:
    sm = BlobStateMachine()
    store.put_bytes(f"{folder_name(1)}/parts-x/s.bin", b"abandoned")
    sm.set(2, "s.bin", b"2")
    _checkpoint(store, sm, retain=3)
    assert list_offsets(store) == [2]


def test_two_writers_at_the_same_offset_leave_a_valid_checkpoint(store, tmp_path: Path) -> None:
    sm = BlobStateMachine()
    sm.set(7, "s.bin", os.urandom(100_000))
    a = Checkpointer(store, sm, every_entries=1000, retain=2, node_id="a")
    b = Checkpointer(store, sm, every_entries=1000, retain=2, node_id="b")
    fa, fb = a.checkpoint(7, 1), b.checkpoint(7, 1)
    results = [fa.result(timeout=120), fb.result(timeout=120)]
    a.close(), b.close()
    assert any(r is not None for r in results)
    restored = BlobStateMachine()
    assert bootstrap(store, restored, scratch_root=tmp_path) == 7
    assert restored.digest() == sm.digest()


def test_store_primitives(store, tmp_path: Path) -> None:
    key = f"{folder_name(1)}/{'MANIFEST.json'}"
    assert not store.exists(key)
    with pytest.raises(FileNotFoundError):
        store.get_bytes(key, 100)
    store.put_bytes(key, b"first")
    store.put_bytes(key, b"second")  # replaces in one step (S3 PUT, rename2, os.replace)
    assert store.exists(key) and store.get_bytes(key, 100) == b"second"
    with pytest.raises(ValueError):
        store.get_bytes(key, 3)
    with pytest.raises(FileNotFoundError):
        store.get_file(f"{folder_name(1)}/nope", tmp_path / "x")
    assert store.list_dirs() == [folder_name(1)]
    store.delete_dir(folder_name(1))
    store.delete_file(key)  # already gone: no error
    assert store.list_dirs() == [] and not store.exists(key)
