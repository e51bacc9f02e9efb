"""Retention: keep the N newest checkpoints and every checkpoint their chains need, never the
newest valid one, drop leftovers.

A folder is deleted manifest first, so a half-deleted folder is never taken for a checkpoint.
Folders without a manifest are deleted only when older than the newest valid checkpoint
(newer ones may still be uploading). "Valid" here means the manifest reads and self-checks and,
for a delta, so does every manifest of its chain (``checkpoints.chain.resolve``): a delta whose
base is gone does not count among the N. The full checkpoint and the deltas a kept delta is
built on are kept however old (never a base a kept delta needs): its chain as the store holds
it now, and the chain its manifest names (which holds every folder of a part it references). Parts
are not downloaded, so keep ``retain >= 2`` to have a fallback when a part is damaged.
"""

from __future__ import annotations

import logging

from checkpoints.chain import needed, resolve
from checkpoints.errors import CorruptCheckpoint, InvariantViolation
from checkpoints.known import KnownManifests
from checkpoints.layout import folder_name, manifest_key
from checkpoints.manifest import Manifest
from checkpoints.read import list_offsets
from checkpoints.stores import CheckpointStore

log = logging.getLogger(__name__)

RETAIN_MAX = 1000


def prune(store: CheckpointStore, retain: int, known: KnownManifests | None = None) -> list[int]:
    """Delete checkpoints beyond the ``retain`` newest valid ones and the chains those need;
    return the deleted offsets. Manifests in ``known`` (those a node read or wrote) are not
    read again; the deleted ones are dropped from it."""
    if not 1 <= retain <= RETAIN_MAX:
        raise ValueError(f"retain must be in 1..{RETAIN_MAX}, got {retain}")
    offsets = list_offsets(store)
    kept: list[Manifest] = []
    links: list[Manifest] = []  # the kept ones' chains, as the store holds them now
    doomed: list[int] = []
    known = KnownManifests() if known is None else known
    for offset in offsets:
        if len(kept) >= retain:
            doomed.append(offset)
            continue
        try:
            manifest = known.read(store, offset)  # must self-check
            links += resolve(store, manifest, known=known)  # and so must its chain's
        except CorruptCheckpoint:
            if kept:  # older than a valid checkpoint: a leftover, not an upload in progress
                doomed.append(offset)
            continue
        kept.append(manifest)
    if doomed and not kept:
        raise InvariantViolation("prune would delete checkpoints while keeping none valid")
    bases = {m.offset for m in links} | needed(links)
    doomed = [o for o in doomed if o not in bases]
    known.forget(store, doomed)
    for offset in doomed:
        store.delete_file(manifest_key(offset))
        store.delete_dir(folder_name(offset))
    if doomed:
        log.info("retention on %s kept %s (and bases %s), deleted %s", store.url,
                 [m.offset for m in kept], sorted(bases), doomed)
    return doomed
