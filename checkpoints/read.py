"""Find checkpoints in a store, read their manifests, and download parts with checks.

Every damage is reported as ``CorruptCheckpoint`` with the part and the reason, so callers
can log one clear line and fall back to an older checkpoint.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from checkpoints.errors import CorruptCheckpoint
from checkpoints.layout import manifest_key, parse_folder, part_key
from checkpoints.manifest import MANIFEST_BYTES_MAX, Manifest, Part, hash_file
from checkpoints.stores import CheckpointStore

DOWNLOAD_THREADS_MAX = 4


def list_offsets(store: CheckpointStore) -> list[int]:
    """Offsets of every checkpoint folder, newest first (with or without a manifest)."""
    offsets = (parse_folder(name) for name in store.list_dirs())
    return sorted((o for o in offsets if o is not None), reverse=True)


def read_manifest(store: CheckpointStore, offset: int, key: bytes | None = None) -> Manifest:
    try:
        data = store.get_bytes(manifest_key(offset), MANIFEST_BYTES_MAX)
    except FileNotFoundError:
        raise CorruptCheckpoint("no MANIFEST.json: partial or abandoned, not a checkpoint") from (
            None
        )
    except ValueError as exc:
        raise CorruptCheckpoint(str(exc)) from None
    return Manifest.from_bytes(data, expected_offset=offset, key=key)


def fetch_parts(store: CheckpointStore, manifest: Manifest, dst: Path) -> None:
    """Download every part into ``dst`` (keeping relative paths) and verify size and sha256.

    The ``parts-<token>/`` prefix is stripped, so ``dst`` holds the files exactly as the state
    machine wrote them. Parts download in parallel (a RocksDB checkpoint is many small files).
    """
    workers = max(1, min(DOWNLOAD_THREADS_MAX, len(manifest.parts)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckpt-fetch") as pool:
        ordered = sorted(manifest.parts, key=lambda p: -p.size)
        for fut in [pool.submit(_fetch_one, store, manifest.offset, p, dst) for p in ordered]:
            fut.result()


def _fetch_one(store: CheckpointStore, offset: int, part: Part, dst: Path) -> None:
    rel = part.path.split("/", 1)[1] if "/" in part.path else part.path
    local = dst / rel
    local.parent.mkdir(parents=True, exist_ok=True)
    folder = offset if part.folder is None else part.folder  # referenced from an earlier one
    try:
        store.get_file(part_key(folder, part.path), local)
    except FileNotFoundError:
        raise CorruptCheckpoint(f"part {part.path} of folder {folder} is missing") from None
    size, digest = hash_file(local)
    if size != part.size:
        raise CorruptCheckpoint(f"part {part.path} is {size} bytes, manifest says {part.size}")
    if digest != part.sha256:
        raise CorruptCheckpoint(f"part {part.path} sha256 {digest} != manifest {part.sha256}")
