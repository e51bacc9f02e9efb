"""Take checkpoints from the apply loop without stalling it.

The node loop calls ``maybe_checkpoint(applied_offset, writer_id)`` after each apply. When the
offset crosses a multiple of ``every_entries`` (the same offsets on every node, so digests can
be compared), the state machine's ``snapshot()`` captures a consistent view on the calling
thread; that capture is the only pause. Writing the parts, uploading them, the manifest and
retention run on one background thread. At most one checkpoint is in flight; a boundary
crossed while one is still uploading is skipped. Failures are logged and counted, never raised
into the apply loop.

Every node captures at the same offsets, so each boundary is also where replicas compare
state: each digest computed is kept in ``digests`` (offset -> digest, the newest
``DIGESTS_KEPT_MAX``), and when another node's manifest for the offset is already in the store,
its digest is compared with ours; a mismatch is logged as an error, counted in
``stats.digest_mismatches`` and passed to ``on_mismatch``: the replicas diverged.

Each node writes what it captured unless the store already holds that offset's checkpoint:
then it only computes its digest and compares (a writer with ``digest()`` and ``close()``).
``write_delay_s`` makes a node wait that long after its capture before it looks: nodes given
different delays write one after the other instead of all at once, and only the first dumps
its state; the others hold their captured view meanwhile.

A checkpoint is full or a delta (``checkpoints.chain``). A writer that offers ``delta_base``
(the offset of the capture its changed keys are relative to, or None), ``write_delta(dir)``
and ``immutable(dir)`` gets a delta when ``chain.plan`` finds a valid checkpoint at that base
in the store (written by any node: all capture at the same offsets) whose chain holds fewer
than ``full_every`` deltas; otherwise ``write(dir)``, a full one (the first checkpoint, after
a failed or missing one, a broken chain, or every ``full_every`` deltas). A delta names the
immutable files its base holds (``chain.reusable``) instead of hashing and uploading them.
The manifests it writes or reads are kept (``checkpoints.known``, bounded by ``full_every``
and ``retain``), so planning a delta and retention read from the store only the manifests
of checkpoints other nodes wrote, once each.

A snapshot writer may offer ``digest()`` (computed on its captured view, in the background)
and ``close()`` (release the view); without ``digest()`` the state machine's ``digest()`` is
called during the capture and counts toward the pause.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from checkpoints import chain
from checkpoints.errors import InvariantViolation
from checkpoints.known import KnownManifests
from checkpoints.layout import manifest_key
from checkpoints.manifest import Manifest
from checkpoints.retention import RETAIN_MAX, prune
from checkpoints.stores import CheckpointStore
from checkpoints.write import upload_checkpoint

log = logging.getLogger(__name__)

PAUSES_KEPT_MAX = 4096
PAUSE_WARN_MS = 50.0
# The upload yields the CPU to the apply loop on a busy machine (measured: apply latency during
# hashing and upload drops several-fold under load, at the cost of slower checkpoints).
BACKGROUND_NICE = 10
EVERY_ENTRIES_MIN = 1
DIGESTS_KEPT_MAX = 1024


class SnapshotWriter(Protocol):
    def write(self, dir: Path) -> None: ...


class Snapshottable(Protocol):
    def snapshot(self) -> SnapshotWriter: ...

    def digest(self) -> str: ...

    @property
    def applied_offset(self) -> int: ...


@dataclass
class CheckpointerStats:
    taken: int = 0
    deltas: int = 0  # of ``taken``
    failed: int = 0
    skipped_busy: int = 0
    skipped_existing: int = 0
    last_offset: int = -1
    last_bytes: int = 0  # uploaded (a delta's referenced parts not counted)
    last_delta_base: int | None = None  # None: the last one was full
    last_upload_s: float = 0.0
    digest_mismatches: int = 0
    pauses_s: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=PAUSES_KEPT_MAX)
    )


class Checkpointer:
    def __init__(
        self,
        store: CheckpointStore,
        state_machine: Snapshottable,
        every_entries: int,
        retain: int,
        *,
        node_id: str = "",
        scratch_root: Path | None = None,
        clock_ms: Callable[[], int] | None = None,
        background_nice: int | None = BACKGROUND_NICE,
        key: bytes | None = None,
        on_mismatch: Callable[[int, str, Manifest], None] | None = None,
        write_delay_s: float = 0.0,
        full_every: int = chain.FULL_EVERY_DELTAS,
        known: KnownManifests | None = None,
    ) -> None:
        """``known``: manifests already read from ``store`` (e.g. by the restore), shared."""
        if every_entries < EVERY_ENTRIES_MIN:
            raise ValueError(f"every_entries must be >= {EVERY_ENTRIES_MIN}, got {every_entries}")
        if not 1 <= retain <= RETAIN_MAX:
            raise ValueError(f"retain must be in 1..{RETAIN_MAX}, got {retain}")
        self.store = store
        self.state_machine = state_machine
        self.every_entries = every_entries
        self.retain = retain
        self.node_id = node_id or socket.gethostname()
        self.scratch_root = scratch_root
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="checkpointer",
            initializer=_lower_priority,
            initargs=(background_nice,),
        )
        self._inflight: Future[Manifest | None] | None = None
        self._lock = threading.Lock()
        self._prev_offset: int | None = None
        self._closed = False
        self.key = key  # signs manifests (see checkpoints.manifest)
        self.on_mismatch = on_mismatch
        self.write_delay_s = write_delay_s
        self.full_every = full_every  # deltas between two full checkpoints (0: never a delta)
        self.known = KnownManifests.for_writer(full_every, retain) if known is None else known
        self._closing = threading.Event()  # cuts a write's delay short
        self.digests: collections.OrderedDict[int, str] = collections.OrderedDict()
        self.stats = CheckpointerStats()

    def maybe_checkpoint(self, applied_offset: int, writer_id: int, writer_seq: int = -1) -> bool:
        """Called after each apply; captures and starts an upload when a boundary is crossed."""
        prev, self._prev_offset = self._prev_offset, applied_offset
        if self._closed:
            return False
        if prev is None or applied_offset // self.every_entries <= prev // self.every_entries:
            return False
        if self.busy:
            self.stats.skipped_busy += 1
            log.warning(
                "checkpoint at %d skipped: the previous one is still uploading", applied_offset
            )
            return False
        self.checkpoint(applied_offset, writer_id, writer_seq)
        return True

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._inflight is not None and not self._inflight.done()

    def checkpoint(
        self, applied_offset: int, writer_id: int, writer_seq: int = -1
    ) -> Future[Manifest | None]:
        """Capture now (on the caller's thread, which must be the apply thread) and upload in
        the background. The future gives the manifest, or None when this offset already had
        a checkpoint in the store."""
        sm_offset = self.state_machine.applied_offset
        if sm_offset != applied_offset:
            raise InvariantViolation(
                f"checkpoint asked at {applied_offset} but the state is at {sm_offset}"
            )
        if self.busy:
            raise InvariantViolation("a checkpoint is already in flight")
        started = time.perf_counter()
        writer = self.state_machine.snapshot()
        captured = time.perf_counter()
        digest = None if callable(getattr(writer, "digest", None)) else self.state_machine.digest()
        pause_s = time.perf_counter() - started
        self.stats.pauses_s.append(pause_s)
        if pause_s * 1000 > PAUSE_WARN_MS:
            log.warning(
                "checkpoint at %d paused apply for %.0f ms (snapshot %.0f ms, digest %.0f ms%s)",
                applied_offset,
                pause_s * 1000,
                (captured - started) * 1000,
                (started + pause_s - captured) * 1000,
                "" if digest is None else "; give the snapshot writer a digest() to move it off",
            )
        created_at_ms = self._clock_ms()
        with self._lock:
            self._inflight = self._pool.submit(
                self._write, writer, applied_offset, (writer_id, writer_seq), digest, created_at_ms
            )
            return self._inflight

    def _write(
        self,
        writer: Any,
        offset: int,
        fence: tuple[int, int],
        digest: str | None,
        created_at_ms: int,
    ) -> Manifest | None:
        scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-{offset}-", dir=self.scratch_root))
        started = time.perf_counter()
        try:
            if self.write_delay_s > 0:
                self._closing.wait(self.write_delay_s)
            if self._written_elsewhere(writer, offset):
                # Another node already wrote this offset: compare our digest with theirs, and
                # dump nothing (the dump is most of a checkpoint's CPU).
                close = writer.close
                try:
                    if digest is None:
                        digest = str(writer.digest())
                finally:
                    close()
                self._record_digest(offset, digest)
                self.stats.skipped_existing += 1
                self._compare(offset, digest)
                return None
            links, base = self._plan(writer)
            # The writer always runs first: it is what releases the captured view (some
            # writers have no close()), even when the upload is then skipped or fails.
            try:
                if links:
                    writer.write_delta(scratch)
                else:
                    writer.write(scratch)
                if digest is None:
                    digest = str(writer.digest())
            finally:
                close = getattr(writer, "close", None)
                if callable(close):
                    close()
            self._record_digest(offset, digest)
            if self.store.exists(manifest_key(offset)):
                # Another node already checkpointed this offset: its state must be ours.
                self.stats.skipped_existing += 1
                self._compare(offset, digest)
                return None
            manifest = upload_checkpoint(
                self.store,
                scratch,
                offset=offset,
                writer_id=fence[0],
                writer_seq=fence[1],
                digest=digest,
                created_at_ms=created_at_ms,
                writer_node=self.node_id,
                key=self.key,
                chain=links,
                reuse=chain.reusable(base, writer.immutable(scratch), links) if base else None,
            )
            self.known.add(self.store, manifest, self.key)
            prune(self.store, self.retain, self.known)
            self.stats.taken += 1
            self.stats.deltas += bool(links)
            self.stats.last_delta_base = links[-1] if links else None
            self.stats.last_offset = offset
            self.stats.last_bytes = manifest.uploaded_bytes
            self.stats.last_upload_s = time.perf_counter() - started
            return manifest
        except Exception:
            self.stats.failed += 1
            log.exception("checkpoint at offset %d to %s failed", offset, self.store.url)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _plan(self, writer: Any) -> tuple[tuple[int, ...], Manifest | None]:
        """The chain of a delta and its base's manifest, or ``((), None)`` for a full one."""
        base = getattr(writer, "delta_base", None)
        if base is None or not callable(getattr(writer, "write_delta", None)):
            return (), None
        with self._lock:
            ours = self.digests.get(base)
        return chain.plan(self.store, base, key=self.key, full_every=self.full_every,
                          base_digest=ours, known=self.known)

    def _written_elsewhere(self, writer: Any, offset: int) -> bool:
        """Whether the store holds this offset's checkpoint already, for a writer that can
        give its digest and release its view without writing."""
        if not (callable(getattr(writer, "close", None))
                and callable(getattr(writer, "digest", None))):
            return False
        return self.store.exists(manifest_key(offset))

    def _record_digest(self, offset: int, digest: str) -> None:
        with self._lock:
            self.digests[offset] = digest
            while len(self.digests) > DIGESTS_KEPT_MAX:
                self.digests.popitem(last=False)

    def _compare(self, offset: int, digest: str) -> None:
        try:
            theirs = self.known.read(self.store, offset, self.key)
        except Exception:  # noqa: BLE001 - a manifest we cannot read proves nothing either way
            log.warning("could not read the manifest at %d to compare digests", offset,
                        exc_info=True)
            return
        if theirs.digest and scheme(theirs.digest) != scheme(digest):
            log.info("the checkpoint at %d has a digest of another definition (%s, ours %s): "
                     "not compared", offset, scheme(theirs.digest) or "unnamed",
                     scheme(digest) or "unnamed")
            return
        if theirs.digest and theirs.digest != digest:
            self.stats.digest_mismatches += 1
            log.error(
                "REPLICA DIVERGED at offset %d: this node (%s) has digest %s, node %s wrote %s",
                offset, self.node_id, digest, theirs.writer_node or "?", theirs.digest,
            )
            if self.on_mismatch is not None:
                self.on_mismatch(offset, digest, theirs)

    def wait(self, timeout_s: float | None = None) -> Manifest | None:
        """Wait for the checkpoint in flight, if any; re-raises its failure."""
        with self._lock:
            fut = self._inflight
        return None if fut is None else fut.result(timeout=timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Let the checkpoint in flight finish (its failure is already logged), then stop;
        later ``maybe_checkpoint`` calls do nothing."""
        self._closed = True
        self._closing.set()
        try:
            self.wait(timeout_s)
        except Exception:  # noqa: BLE001 - already logged by _write
            pass
        self._pool.shutdown(wait=True)


def _lower_priority(nice: int | None) -> None:
    """On Linux, nice applies to one thread (its native id) and the threads it starts (the
    upload pool), not the whole process. DuckDB's own worker threads keep their priority."""
    if nice is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


def scheme(digest: str) -> str:
    """The name of a digest's definition, before its first ``:`` ("" for the unnamed first
    one): digests of two definitions never compare equal, so they are not compared (a node
    upgraded next to manifests written before)."""
    return digest.split(":", 1)[0] if ":" in digest else ""
