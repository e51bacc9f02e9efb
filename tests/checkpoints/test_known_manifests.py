"""Planning a delta reads its base's manifest and retention reads nothing it knows: the
manifests a node read or wrote are kept (``checkpoints.known``), so the store reads per
checkpoint stay bounded however long the chain grows."""

from __future__ import annotations

from pathlib import Path

from checkpoints import Checkpointer, KnownManifests, restore_newest
from checkpoints.chain import FULL_EVERY_DELTAS
from checkpoints.stores.local import LocalStore
from tests.checkpoints.helpers import DeltaBlobStateMachine

RETAIN = 3


class CountingStore:
    """A local store that counts its manifest reads (``get_bytes``)."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalStore(root)
        self.url = self.inner.url
        self.manifest_reads = 0

    def get_bytes(self, key: str, size_max: int) -> bytes:
        self.manifest_reads += 1
        return self.inner.get_bytes(key, size_max)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def checkpointer(store, tmp_path: Path, sm, **kw) -> Checkpointer:
    return Checkpointer(store, sm, every_entries=10**9, retain=RETAIN, scratch_root=tmp_path,
                        background_nice=None, **kw)


def write_one(cp: Checkpointer, sm: DeltaBlobStateMachine, offset: int):
    sm.set(offset, f"runs/{offset % 7}", str(offset).encode())
    cp.checkpoint(sm.applied_offset, 1)
    return cp.wait()


def test_reads_per_checkpoint_stay_bounded_along_a_whole_chain_and_past_it(tmp_path):
    store = CountingStore(tmp_path / "store")
    sm = DeltaBlobStateMachine()
    cp = checkpointer(store, tmp_path, sm)
    reads, kinds = [], []
    try:
        for i in range(1, FULL_EVERY_DELTAS + 6):  # a full one, 30 deltas, a full one, deltas
            before = store.manifest_reads
            manifest = write_one(cp, sm, 10 * i)
            reads.append(store.manifest_reads - before)
            kinds.append(len(manifest.chain))
    finally:
        cp.close()
    assert kinds[: FULL_EVERY_DELTAS + 3] == [*range(FULL_EVERY_DELTAS + 1), 0, 1]
    # Every base is this node's own previous checkpoint: its manifest is read (is it still
    # there and whole?), its chain is known. The old planning read the base and its whole
    # chain again, 31 manifests for the 30th delta, and retention as many once more.
    assert reads == [0] + [1] * (len(reads) - 1)
    assert len(cp.known) <= FULL_EVERY_DELTAS + 1 + RETAIN


def test_a_base_another_node_wrote_costs_one_read_of_its_manifest(tmp_path):
    store = CountingStore(tmp_path / "store")
    sm = DeltaBlobStateMachine()
    first = checkpointer(store, tmp_path, sm)
    try:
        for i in range(1, 6):
            write_one(first, sm, 10 * i)
    finally:
        first.close()
    # A node restored from the chain knows its manifests: its first delta reads none again.
    restored, known = DeltaBlobStateMachine(), KnownManifests(FULL_EVERY_DELTAS + 1 + RETAIN)
    assert restore_newest(store, restored, scratch_root=tmp_path, known=known).offset == 50
    other = checkpointer(store, tmp_path, restored, known=known)
    try:
        before = store.manifest_reads
        assert write_one(other, restored, 60).chain == (10, 20, 30, 40, 50)
        assert store.manifest_reads == before + 1  # the base, checked
    finally:
        other.close()
    # A node that never read the chain (it started before the checkpoints were written) reads
    # the new base's chain once, then nothing more per checkpoint.
    fresh = checkpointer(store, tmp_path, sm)
    try:
        sm.since = 60  # as if its previous capture was at 60, written by the other node
        before = store.manifest_reads
        assert write_one(fresh, sm, 70).chain == (10, 20, 30, 40, 50, 60)
        first_reads = store.manifest_reads - before
        before = store.manifest_reads
        assert write_one(fresh, sm, 80).chain == (10, 20, 30, 40, 50, 60, 70)
        assert store.manifest_reads == before + 1
    finally:
        fresh.close()
    assert first_reads == 6  # 60 and its chain, each once (retention then knows them)


def test_a_base_damaged_after_this_node_wrote_it_is_forgotten_and_a_full_one_follows(tmp_path):
    store = CountingStore(tmp_path / "store")
    sm = DeltaBlobStateMachine()
    cp = checkpointer(store, tmp_path, sm)
    try:
        write_one(cp, sm, 10)
        write_one(cp, sm, 20)
        store.inner.delete_file("00000000000000000020/MANIFEST.json")
        assert write_one(cp, sm, 30).chain == ()
        assert cp.known.get(store, 20) is None
        assert write_one(cp, sm, 40).chain == (30,)
    finally:
        cp.close()


def test_a_manifest_read_without_the_key_is_not_trusted_by_a_reader_with_one(tmp_path):
    store = CountingStore(tmp_path / "store")
    sm = DeltaBlobStateMachine()
    cp = checkpointer(store, tmp_path, sm)
    try:
        manifest = write_one(cp, sm, 10)
    finally:
        cp.close()
    known = KnownManifests(4)
    assert known.read(store, 10) == manifest  # unsigned: read without a key
    assert known.get(store, 10, b"k" * 32) is None
    assert known.get(store, 10) == manifest
    known.forget(store, [10])
    assert known.get(store, 10) is None
