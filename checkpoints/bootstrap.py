"""Start a node from the newest valid checkpoint instead of replaying the whole log.

``bootstrap`` walks the checkpoints newest first; for each it reads and self-checks the
manifest (and, for a delta, the manifests of its chain: ``checkpoints.chain``), downloads the
parts verifying size and sha256 (a delta's: the full checkpoint's and each delta's, into one
folder each), restores the state machine (a chain through its ``restore_chain(dirs)``, oldest
first), and checks the restored digest against the manifest. Anything wrong is logged on one
line and the next older checkpoint is tried. The caller then replays the log from the returned
offset + 1 (or from the start when it returns None).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Protocol

from checkpoints.chain import resolve
from checkpoints.errors import CorruptCheckpoint
from checkpoints.known import KnownManifests
from checkpoints.manifest import Manifest
from checkpoints.read import fetch_parts, list_offsets
from checkpoints.stores import CheckpointStore

log = logging.getLogger(__name__)

ATTEMPTS_MAX = 32


class Restorable(Protocol):
    def restore(self, dir: Path) -> None: ...

    def digest(self) -> str: ...

    @property
    def applied_offset(self) -> int: ...


def bootstrap(
    store: CheckpointStore,
    state_machine: Restorable,
    *,
    scratch_root: Path | None = None,
    verify_digest: bool = True,
    key: bytes | None = None,
) -> int | None:
    """Restore the newest valid checkpoint; return its offset, or None when there is none."""
    manifest = restore_newest(
        store, state_machine, scratch_root=scratch_root, verify_digest=verify_digest, key=key
    )
    return None if manifest is None else manifest.offset


def restore_newest(
    store: CheckpointStore,
    state_machine: Restorable,
    *,
    scratch_root: Path | None = None,
    verify_digest: bool = True,
    key: bytes | None = None,
    known: KnownManifests | None = None,
) -> Manifest | None:
    """Like ``bootstrap`` but returns the whole manifest: a replog node also needs its
    ``writer_id`` and ``writer_seq`` (the fence at that offset) as ``start_writer_id`` and
    ``start_writer_seq``. With ``key``, only manifests signed with it are restored. The
    manifests read are added to ``known`` (the node's checkpointer plans its first delta on
    the restored chain without reading it again)."""
    known = KnownManifests() if known is None else known
    offsets = list_offsets(store)
    if not offsets:
        log.info("no checkpoint in %s: replaying the log from the start", store.url)
        return None
    for attempt, offset in enumerate(offsets):
        if attempt >= ATTEMPTS_MAX:
            log.error("gave up after %d unusable checkpoints in %s", ATTEMPTS_MAX, store.url)
            break
        scratch = Path(tempfile.mkdtemp(prefix=f"restore-{offset}-", dir=scratch_root))
        started = time.perf_counter()
        try:
            manifest = known.read(store, offset, key)
            links = resolve(store, manifest, key, known)
            dirs = [scratch / f"{at:03d}-{link.offset}" for at, link in enumerate(links)]
            for link, folder in zip(links, dirs, strict=True):
                fetch_parts(store, link, folder)
            fetched_s = time.perf_counter() - started
            restore_chain = getattr(state_machine, "restore_chain", None)
            if len(dirs) > 1 and restore_chain is None:
                raise CorruptCheckpoint("a delta, and this state machine restores full ones only")
            try:
                if restore_chain is not None and len(dirs) > 1:
                    restore_chain(dirs)
                else:
                    state_machine.restore(dirs[0])
            except Exception as exc:  # verified bytes it cannot read: e.g. an older format
                raise CorruptCheckpoint(f"the state machine could not restore it: {exc!r}") from exc
            restored = state_machine.applied_offset
            if restored != offset:
                raise CorruptCheckpoint(f"restored state is at offset {restored}, not {offset}")
            if verify_digest and manifest.digest:
                digest = state_machine.digest()
                if digest != manifest.digest:
                    raise CorruptCheckpoint(
                        f"restored digest {digest} != manifest digest {manifest.digest}"
                    )
        except CorruptCheckpoint as exc:
            log.warning(
                "skipping checkpoint %d in %s: %s; falling back to the one before",
                offset,
                store.url,
                exc,
            )
            continue
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log.info(
            "restored checkpoint %d from %s (%s%d bytes, fetch %.3f s, total %.3f s, writer %s);"
            " replay from offset %d",
            offset,
            store.url,
            f"a delta on {len(links) - 1} checkpoints, " if len(links) > 1 else "",
            sum(link.uploaded_bytes for link in links),
            fetched_s,
            time.perf_counter() - started,
            manifest.writer_node or "?",
            offset + 1,
        )
        return manifest
    log.warning("no usable checkpoint in %s: replaying the log from the start", store.url)
    return None
