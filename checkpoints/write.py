"""Upload one checkpoint: every part first, then the manifest, so a reader never trusts a
folder whose parts are not all there.

Parts go under a ``parts-<token>/`` sub-folder unique to this upload: if two nodes checkpoint
the same offset into the same store at once, each manifest names only its own parts, and the
last manifest written wins with a complete set.

A delta (``chain`` set: ``checkpoints.chain``) uploads only its own files; a file found in
``reuse`` (the same relative path and size as a part of an earlier checkpoint of its chain,
which the state machine's writer says never changes once made) is named by that part.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from checkpoints.layout import PARTS_DIR_PREFIX, manifest_key, part_key
from checkpoints.manifest import FORMAT, FORMAT_DELTA, Manifest, Part, scan_parts
from checkpoints.stores import CheckpointStore

log = logging.getLogger(__name__)

UPLOAD_THREADS_MAX = 4


def upload_checkpoint(
    store: CheckpointStore,
    parts_root: Path,
    *,
    offset: int,
    writer_id: int,
    digest: str,
    created_at_ms: int,
    writer_node: str = "",
    threads: int = UPLOAD_THREADS_MAX,
    writer_seq: int = -1,
    key: bytes | None = None,
    chain: tuple[int, ...] = (),
    reuse: Mapping[str, Part] | None = None,
) -> Manifest:
    """Upload the files under ``parts_root`` as the checkpoint at ``offset``; manifest last."""
    prefix = f"{PARTS_DIR_PREFIX}{uuid.uuid4().hex[:12]}"
    found = scan_parts(parts_root, prefix, reuse if chain else None)
    uploads = [(src, part) for src, part in found if src is not None]
    manifest = Manifest(
        offset=offset,
        writer_id=writer_id,
        created_at_ms=created_at_ms,
        digest=digest,
        parts=tuple(part for _, part in found),
        writer_node=writer_node,
        writer_seq=writer_seq,
        format=FORMAT_DELTA if chain else FORMAT,
        chain=tuple(chain),
    )
    started = time.perf_counter()
    workers = max(1, min(threads, UPLOAD_THREADS_MAX, len(uploads)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-upload") as pool:
        # Large files go first so the pool is not left waiting on one at the end.
        ordered = sorted(uploads, key=lambda item: -item[1].size)
        futures = [pool.submit(store.put_file, part_key(offset, p.path), src) for src, p in ordered]
        for fut in futures:
            fut.result()
    store.put_bytes(manifest_key(offset), manifest.to_bytes(key))
    log.info(
        "checkpoint %d written to %s: %s%d parts, %d bytes in %.3f s",
        offset,
        store.url,
        f"delta on {chain[-1]}, " if chain else "",
        len(uploads),
        manifest.uploaded_bytes,
        time.perf_counter() - started,
    )
    return manifest
