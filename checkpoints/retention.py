"""Retention: keep the N newest checkpoints, never the newest valid one, drop leftovers.

A folder is deleted manifest first, so a half-deleted folder is never taken for a checkpoint.
Folders without a manifest are deleted only when older than the newest valid checkpoint
(newer ones may still be uploading). "Valid" here means the manifest reads and self-checks;
parts are not downloaded, so keep ``retain >= 2`` to have a fallback when a part is damaged.
"""

from __future__ import annotations

import logging

from checkpoints.errors import CorruptCheckpoint, InvariantViolation
from checkpoints.layout import folder_name, manifest_key
from checkpoints.read import list_offsets, read_manifest
from checkpoints.stores import CheckpointStore

log = logging.getLogger(__name__)

RETAIN_MAX = 1000


def prune(store: CheckpointStore, retain: int) -> list[int]:
    """Delete checkpoints beyond the ``retain`` newest valid ones; return the deleted offsets."""
    if not 1 <= retain <= RETAIN_MAX:
        raise ValueError(f"retain must be in 1..{RETAIN_MAX}, got {retain}")
    offsets = list_offsets(store)
    kept: list[int] = []
    doomed: list[int] = []
    for offset in offsets:
        if len(kept) >= retain:
            doomed.append(offset)
            continue
        try:
            read_manifest(store, offset)  # manifest must parse and self-check
        except CorruptCheckpoint:
            if kept:  # older than a valid checkpoint: a leftover, not an upload in progress
                doomed.append(offset)
            continue
        kept.append(offset)
    if doomed and not kept:
        raise InvariantViolation("prune would delete checkpoints while keeping none valid")
    for offset in doomed:
        store.delete_file(manifest_key(offset))
        store.delete_dir(folder_name(offset))
    if doomed:
        log.info("retention on %s kept %s, deleted %s", store.url, kept, doomed)
    return doomed
