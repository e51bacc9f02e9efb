"""The manifests a node read or wrote, kept so that planning a delta does not read its whole
chain from the store again for every checkpoint.

A manifest never changes once written (a checkpoint's folder is only ever deleted, manifest
first), so a manifest read or written once can be trusted by offset until this node deletes
it. Entries are keyed by the store's URL and the offset, and bounded (least recently used goes
first): a writer needs the chain of its base (at most ``full_every + 1`` manifests) and the
newest ones retention keeps.

What this gives up: a link older than the base, deleted or damaged by someone else after this
node read it, is not noticed when planning (the base itself is read each time: a delta never
goes on a base that is gone); a restore still reads and checks every link, and falls back to
an older checkpoint when one is unusable.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable

from checkpoints.manifest import Manifest
from checkpoints.read import read_manifest
from checkpoints.stores import CheckpointStore


class KnownManifests:
    """A bounded map (store URL, offset) -> the manifest read or written there, and the key
    its signature was checked with (a manifest read without one is not given to a reader
    that asks for one)."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit  # None: unbounded (one call's scratch cache)
        self._by_key: collections.OrderedDict[
            tuple[str, int], tuple[Manifest, bytes | None]] = collections.OrderedDict()
        self._lock = threading.Lock()  # the checkpoint thread writes, a restore may read

    @classmethod
    def for_writer(cls, full_every: int, retain: int) -> KnownManifests:
        """Room for a base's chain (``full_every + 1``) and the newest ones retention keeps."""
        return cls(full_every + 1 + retain)

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, store: CheckpointStore, offset: int, key: bytes | None = None
            ) -> Manifest | None:
        """The manifest known at ``offset``; with ``key``, only one checked with that key."""
        with self._lock:
            known = self._by_key.get((store.url, offset))
            if known is None or (key is not None and known[1] != key):
                return None
            self._by_key.move_to_end((store.url, offset))
            return known[0]

    def add(self, store: CheckpointStore, manifest: Manifest, key: bytes | None = None) -> None:
        """Keep ``manifest``, read with (or written under) ``key``."""
        with self._lock:
            self._by_key[(store.url, manifest.offset)] = (manifest, key)
            self._by_key.move_to_end((store.url, manifest.offset))
            while self.limit is not None and len(self._by_key) > self.limit:
                self._by_key.popitem(last=False)

    def forget(self, store: CheckpointStore, offsets: Iterable[int]) -> None:
        """Drop the manifests of deleted checkpoints (a later one there is another one)."""
        with self._lock:
            for offset in offsets:
                self._by_key.pop((store.url, offset), None)

    def read(self, store: CheckpointStore, offset: int, key: bytes | None = None) -> Manifest:
        """The manifest at ``offset``: known, or read (and self-checked) and kept. Raises
        ``CorruptCheckpoint`` as ``read_manifest`` does."""
        manifest = self.get(store, offset, key)
        if manifest is None:
            manifest = read_manifest(store, offset, key)
            self.add(store, manifest, key)
        return manifest
