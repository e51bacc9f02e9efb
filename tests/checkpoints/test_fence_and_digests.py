"""A checkpoint carries the fence's (writer_id, seq) and may be signed; nodes checkpointing the
same offset compare their digests, and a mismatch is reported, not swallowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints import Checkpointer, CorruptCheckpoint, Manifest, read_manifest, restore_newest
from checkpoints.layout import manifest_key
from checkpoints.stores.local import LocalStore

from .helpers import BlobStateMachine

KEY = b"k" * 32


def _sm(offset: int, data: bytes) -> BlobStateMachine:
    sm = BlobStateMachine()
    sm.set(offset, "s.bin", data)
    return sm


def test_the_manifest_carries_the_fence_seq_and_restore_returns_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    cp = Checkpointer(store, _sm(10, b"x"), every_entries=10, retain=2)
    cp.checkpoint(10, 4, 77).result(timeout=60)
    cp.close()
    manifest = restore_newest(store, BlobStateMachine())
    assert manifest is not None and (manifest.writer_id, manifest.writer_seq) == (4, 77)


def test_a_manifest_from_before_the_seq_reads_as_unknown() -> None:
    m = Manifest(offset=1, writer_id=2, created_at_ms=3, digest="d", parts=())
    body = json.loads(m.to_bytes())
    body.pop("writer_seq"), body.pop("manifest_sha256")
    import hashlib

    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    body["manifest_sha256"] = hashlib.sha256(canonical).hexdigest()
    assert Manifest.from_bytes(json.dumps(body).encode()).writer_seq == -1


def test_with_a_key_only_signed_manifests_are_restored(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    unsigned = Checkpointer(store, _sm(10, b"old"), every_entries=10, retain=5)
    unsigned.checkpoint(10, 1).result(timeout=60)
    unsigned.close()
    signed = Checkpointer(store, _sm(20, b"new"), every_entries=10, retain=5, key=KEY)
    signed.checkpoint(20, 1).result(timeout=60)
    signed.close()
    with pytest.raises(CorruptCheckpoint, match="not signed"):
        read_manifest(store, 10, KEY)
    with pytest.raises(CorruptCheckpoint, match="not signed"):
        read_manifest(store, 20, b"another key")
    assert read_manifest(store, 20, KEY).offset == 20
    # A forged newest checkpoint (valid sha256, no key) is skipped for the signed one.
    forged = Manifest.from_bytes(store.get_bytes(manifest_key(20), 1 << 20))
    store.put_bytes(manifest_key(30), Manifest(
        offset=30, writer_id=1, created_at_ms=1, digest="", parts=forged.parts).to_bytes())
    restored = BlobStateMachine()
    manifest = restore_newest(store, restored, key=KEY)
    assert manifest is not None and manifest.offset == 20 and restored.applied_offset == 20


def test_replicas_with_different_state_at_one_offset_are_reported(tmp_path: Path, caplog) -> None:
    store = LocalStore(tmp_path / "s")
    first = Checkpointer(store, _sm(10, b"same"), every_entries=10, retain=2, node_id="a")
    first.checkpoint(10, 1).result(timeout=60)
    seen = []
    agrees = Checkpointer(store, _sm(10, b"same"), every_entries=10, retain=2, node_id="b",
                          on_mismatch=lambda *a: seen.append(a))
    assert agrees.checkpoint(10, 1).result(timeout=60) is None
    assert agrees.stats.digest_mismatches == 0 and not seen
    diverged = Checkpointer(store, _sm(10, b"other"), every_entries=10, retain=2, node_id="c",
                            on_mismatch=lambda *a: seen.append(a))
    assert diverged.checkpoint(10, 1).result(timeout=60) is None
    assert diverged.stats.digest_mismatches == 1
    (offset, ours, theirs), = seen
    assert offset == 10 and theirs.writer_node == "a" and ours == diverged.digests[10]
    assert "REPLICA DIVERGED at offset 10" in caplog.text
    for cp in (first, agrees, diverged):
        cp.close()


def test_digests_of_another_definition_are_not_compared(tmp_path: Path) -> None:
    """A node whose digest is named by another definition (``scheme:hex``) than the manifest's
    at the same offset (written before an upgrade) reports no divergence; one of the same
    definition still does."""

    class Named(BlobStateMachine):
        def digest(self) -> str:
            return "rowsum1:" + super().digest()

    store = LocalStore(tmp_path / "s")
    before = Checkpointer(store, _sm(10, b"same"), every_entries=10, retain=2, node_id="a")
    before.checkpoint(10, 1).result(timeout=60)
    upgraded = Named()
    upgraded.set(10, "s.bin", b"same")
    seen = []
    after = Checkpointer(store, upgraded, every_entries=10, retain=2, node_id="b",
                         on_mismatch=lambda *a: seen.append(a))
    assert after.checkpoint(10, 1).result(timeout=60) is None
    assert after.stats.digest_mismatches == 0 and not seen
    assert after.digests[10].startswith("rowsum1:") and ":" not in before.digests[10]
    store2 = LocalStore(tmp_path / "s2")
    named = Checkpointer(store2, upgraded, every_entries=10, retain=2, node_id="a")
    named.checkpoint(10, 1).result(timeout=60)
    other = Named()
    other.set(10, "s.bin", b"other")
    diverged = Checkpointer(store2, other, every_entries=10, retain=2, node_id="c")
    assert diverged.checkpoint(10, 1).result(timeout=60) is None
    assert diverged.stats.digest_mismatches == 1
    for cp in (before, after, named, diverged):
        cp.close()
