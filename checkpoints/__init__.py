"""Consistent snapshots of the state to S3, HDFS or a local directory, and bootstrap.

A checkpoint is a folder ``<prefix>/<log_offset>/`` (offset zero-padded to 20 digits) holding
the parts a state machine's snapshot wrote plus a ``MANIFEST.json`` written last (offset,
writer id, time, state digest, each part's size and sha256); a folder without a valid manifest
is not a checkpoint. A checkpoint is full, or a delta on an earlier one (``checkpoints.chain``:
only what changed since; a restore reads the full one and each delta after it).

What the caller does:
- build a store with ``store_from_url("file:///..." | "s3://bucket/prefix?endpoint=..." |
  "webhdfs://host:port/path")``;
- at start, ``offset = bootstrap(store, state_machine)`` and replay the log from
  ``offset + 1`` (from the start when it is None); ``CatchUp`` reports progress meanwhile
  (``restore_newest`` gives the whole manifest, whose ``writer_id`` seeds the fence);
- on the apply thread, after each apply, ``checkpointer.maybe_checkpoint(applied, writer_id)``
  (``Checkpointer(store, state_machine, every_entries, retain)``): it captures synchronously
  and uploads in the background; ``close()`` it at shutdown.
"""

from checkpoints.bootstrap import bootstrap, restore_newest
from checkpoints.checkpointer import Checkpointer, CheckpointerStats
from checkpoints.errors import CheckpointStoreError, CorruptCheckpoint, InvariantViolation
from checkpoints.known import KnownManifests
from checkpoints.manifest import Manifest, Part
from checkpoints.progress import CatchUp, Progress
from checkpoints.read import fetch_parts, list_offsets, read_manifest
from checkpoints.retention import prune
from checkpoints.stores import CheckpointStore
from checkpoints.urls import store_from_url
from checkpoints.write import upload_checkpoint

__all__ = [
    "KnownManifests",
    "CatchUp",
    "CheckpointStore",
    "CheckpointStoreError",
    "Checkpointer",
    "CheckpointerStats",
    "CorruptCheckpoint",
    "InvariantViolation",
    "Manifest",
    "Part",
    "Progress",
    "bootstrap",
    "fetch_parts",
    "list_offsets",
    "prune",
    "read_manifest",
    "restore_newest",
    "store_from_url",
    "upload_checkpoint",
]
