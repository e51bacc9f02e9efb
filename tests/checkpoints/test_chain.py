"""Delta checkpoints in a store: the manifest's chain and referenced parts, restore of a chain,
its breaks, and retention keeping every base a kept delta needs (``checkpoints.chain``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from checkpoints import (
    Checkpointer,
    CorruptCheckpoint,
    Manifest,
    Part,
    prune,
    read_manifest,
    restore_newest,
    upload_checkpoint,
)
from checkpoints.layout import folder_name, manifest_key
from checkpoints.manifest import FORMAT, FORMAT_DELTA
from checkpoints.read import list_offsets
from tests.checkpoints.helpers import DeltaBlobStateMachine, flip_byte

SHA = "ab" * 32


def chain_of(store, tmp_path: Path, sm: DeltaBlobStateMachine, **kw) -> Checkpointer:
    kw.setdefault("retain", 10)
    return Checkpointer(store, sm, every_entries=10**9, scratch_root=tmp_path,
                        background_nice=None, **kw)


def write(cp: Checkpointer, sm: DeltaBlobStateMachine) -> Manifest:
    cp.checkpoint(sm.applied_offset, 1)
    return cp.wait()


def three(store, tmp_path: Path, **kw) -> tuple[DeltaBlobStateMachine, list[Manifest]]:
    """A full checkpoint at 10 and deltas at 20 and 30 (one blob changed, one deleted, an
    immutable segment added)."""
    sm = DeltaBlobStateMachine()
    cp = chain_of(store, tmp_path, sm, **kw)
    out = []
    try:
        sm.set(8, "seg/1", b"s" * 5000)
        sm.set(9, "runs/a", b"a0")
        sm.set(10, "runs/b", b"b0")
        out.append(write(cp, sm))
        sm.set(15, "runs/a", b"a1")
        sm.set(20, "seg/2", b"t" * 5000)
        out.append(write(cp, sm))
        sm.delete(25, "runs/b")
        sm.set(30, "runs/c", b"c0")
        out.append(write(cp, sm))
    finally:
        cp.close()
    return sm, out


def test_a_chain_restores_the_state_and_names_immutable_files_once(store, tmp_path) -> None:
    sm, (full, d1, d2) = three(store, tmp_path)
    assert (full.chain, d1.chain, d2.chain) == ((), (10,), (10, 20))
    assert (full.format, d1.format) == (FORMAT, FORMAT_DELTA)
    seg1 = [p for p in d2.parts if p.path.endswith("seg/1")]
    seg2 = [p for p in d2.parts if p.path.endswith("seg/2")]
    assert [p.folder for p in seg1] == [10] and [p.folder for p in seg2] == [20]
    assert not any(p.path.endswith("runs/a") for p in d2.parts)  # unchanged since 20
    assert d2.uploaded_bytes < 100 < d2.total_bytes
    restored = DeltaBlobStateMachine()
    assert restore_newest(store, restored).offset == 30
    assert restored.blobs == sm.blobs and restored.digest() == sm.digest()


def test_a_delta_whose_base_is_gone_falls_back_to_the_one_before(store, tmp_path, caplog) -> None:
    sm, _ = three(store, tmp_path)
    store.delete_file(manifest_key(20))
    store.delete_dir(folder_name(20))
    restored = DeltaBlobStateMachine()
    with caplog.at_level(logging.WARNING):
        assert restore_newest(store, restored).offset == 10
    assert "delta 30 needs checkpoint 20" in caplog.text


def test_a_corrupt_part_of_a_delta_is_named(store, tmp_path, caplog) -> None:
    sm, (_, _, d2) = three(store, tmp_path)
    part = next(p for p in d2.parts if p.path.endswith("runs/c"))
    flip_byte(store, f"{folder_name(30)}/{part.path}", tmp_path)
    with caplog.at_level(logging.WARNING):
        assert restore_newest(store, DeltaBlobStateMachine()).offset == 20
    assert "runs/c sha256" in caplog.text and "skipping checkpoint 30" in caplog.text


def test_a_referenced_part_is_checked_like_its_own(store, tmp_path, caplog) -> None:
    _, (_, _, d2) = three(store, tmp_path)
    seg = next(p for p in d2.parts if p.path.endswith("seg/2"))
    flip_byte(store, f"{folder_name(20)}/{seg.path}", tmp_path)
    with caplog.at_level(logging.WARNING):
        assert restore_newest(store, DeltaBlobStateMachine()).offset == 10  # 30 and 20 hold it
    assert "seg/2 sha256" in caplog.text


def test_a_base_written_again_as_a_full_one_serves_alike(store, tmp_path) -> None:
    """Another node wrote the offset 20 again, as a full checkpoint (the last manifest wins):
    the delta at 30 applies on it, retention keeps 10 (30 names its segment there), and the
    next delta's chain is the one the store holds now."""
    sm, _ = three(store, tmp_path)
    twin = DeltaBlobStateMachine()
    twin.set(8, "seg/1", b"s" * 5000)
    twin.set(9, "runs/a", b"a0")
    twin.set(10, "runs/b", b"b0")
    twin.set(15, "runs/a", b"a1")
    twin.set(20, "seg/2", b"t" * 5000)
    twin.snapshot().write(tmp_path / "twin")
    upload_checkpoint(store, tmp_path / "twin", offset=20, writer_id=1, digest=twin.digest(),
                      created_at_ms=0)
    assert read_manifest(store, 20).chain == ()
    restored = DeltaBlobStateMachine()
    assert restore_newest(store, restored).offset == 30 and restored.blobs == sm.blobs
    assert prune(store, 1) == []  # 30 names seg/1 in folder 10
    cp = chain_of(store, tmp_path, sm)
    try:
        sm.set(40, "runs/d", b"d")
        m = write(cp, sm)
    finally:
        cp.close()
    assert m.chain == (20, 30)
    assert {p.folder for p in m.parts if "seg/" in p.path} == {None, 20}  # seg/1 uploaded
    restored = DeltaBlobStateMachine()
    assert restore_newest(store, restored).offset == 40 and restored.blobs == sm.blobs
    assert prune(store, 1) == []  # 40 needs 30, which names seg/1 in 10


def test_a_broken_chain_or_the_kth_delta_makes_a_full_one(store, tmp_path) -> None:
    sm = DeltaBlobStateMachine()
    cp = chain_of(store, tmp_path, sm, full_every=2)
    chains = []
    try:
        for offset in range(10, 80, 10):
            if offset == 60:  # the base's manifest is damaged
                flip_byte(store, manifest_key(50), tmp_path)
            sm.set(offset, f"runs/{offset}", b"x")
            chains.append(write(cp, sm).chain)
    finally:
        cp.close()
    assert chains == [(), (10,), (10, 20), (), (40,), (), (60,)]


def test_a_base_with_another_digest_than_ours_makes_a_full_one(store, tmp_path) -> None:
    sm = DeltaBlobStateMachine()
    cp = chain_of(store, tmp_path, sm)
    try:
        sm.set(10, "runs/a", b"a")
        write(cp, sm)
        cp.digests[10] = "not-ours"  # another node's state at 10 was not this node's
        sm.set(20, "runs/b", b"b")
        assert write(cp, sm).chain == ()
    finally:
        cp.close()


def test_retention_keeps_every_base_a_kept_delta_needs(store, tmp_path) -> None:
    sm, _ = three(store, tmp_path)
    assert prune(store, 1) == []
    assert list_offsets(store) == [30, 20, 10]
    cp = chain_of(store, tmp_path, sm, full_every=0)  # the next one is full
    try:
        sm.set(40, "runs/d", b"d")
        assert write(cp, sm).chain == ()
    finally:
        cp.close()
    assert prune(store, 2) == []  # 40 and 30 kept, and 30 needs 20 and 10
    assert sorted(prune(store, 1)) == [10, 20, 30]
    restored = DeltaBlobStateMachine()
    assert restore_newest(store, restored).offset == 40 and restored.blobs == sm.blobs


def test_retention_does_not_count_a_delta_without_its_base(store, tmp_path) -> None:
    sm = DeltaBlobStateMachine()
    cp = chain_of(store, tmp_path, sm, full_every=1)  # 10 full, 20 delta, 30 full, 40 delta
    try:
        for offset in (10, 20, 30, 40):
            sm.set(offset, f"runs/{offset}", b"x")
            write(cp, sm)
    finally:
        cp.close()
    assert read_manifest(store, 40).chain == (30,)
    flip_byte(store, manifest_key(30), tmp_path)  # 40 is unusable now
    assert prune(store, 1) == []  # 20 is the newest usable: kept, and 10 that it needs
    restored = DeltaBlobStateMachine()
    assert restore_newest(store, restored).offset == 20


def test_a_full_manifest_reads_and_writes_as_before() -> None:
    m = Manifest(offset=7, writer_id=1, created_at_ms=0, digest="d",
                 parts=(Part("parts-1/a", 1, SHA),))
    body = json.loads(m.to_bytes())
    assert "chain" not in body and "folder" not in body["parts"][0]
    assert body["format"] == FORMAT
    for key in ("manifest_sha256", "total_bytes"):
        body.pop(key)
    assert Manifest.from_bytes(m.to_bytes(), expected_offset=7) == m


@pytest.mark.parametrize("fmt, chain, folder, why", [
    (FORMAT, (3,), None, "with a chain"),
    (FORMAT_DELTA, (), None, "with a chain of 0"),
    (FORMAT_DELTA, (5, 3), None, "does not increase"),
    (FORMAT_DELTA, (3, 7), None, "does not increase"),
    (FORMAT_DELTA, (3,), 4, "not in the chain"),
])
def test_a_delta_manifest_names_an_increasing_chain(fmt, chain, folder, why) -> None:
    m = Manifest(offset=7, writer_id=1, created_at_ms=0, digest="d", format=fmt, chain=chain,
                 parts=(Part("parts-1/a", 1, SHA, folder),))
    with pytest.raises(CorruptCheckpoint, match=why):
        Manifest.from_bytes(m.to_bytes(), expected_offset=7)
