"""Chains of delta checkpoints: the base a new delta goes on, what a restore reads, what
retention keeps.

A delta checkpoint (manifest format 2, ``Manifest.chain``) holds only what changed since its
base, the checkpoint at ``chain[-1]``; ``chain[0]`` is a full checkpoint and the rest are the
deltas between, so restoring it means the full one, then each delta in order, then it.

- ``plan``: a node writes a delta on base B only if the store holds a valid checkpoint at B
  whose chain is whole (every node captures at the same offsets, so any node's checkpoint at
  B is an equal base; when this node knows its own digest at B, B's must equal it), and B's
  chain holds fewer than ``full_every`` deltas; otherwise a full one. After ``full_every``
  deltas a full checkpoint bounds the restore (one full and at most ``full_every`` deltas to
  read) and the chain retention must keep.
- ``resolve``: the manifests of a checkpoint's chain, oldest first, following each base as
  the store holds it now (or as this node last read or wrote it: ``KnownManifests``).

Both take the manifests a node already read or wrote (``checkpoints.known``): planning the
next delta reads one manifest from the store, its base's (as the store holds it now: damaged,
deleted or written again by another node, it is noticed before a delta goes on it), and the
links of the base's chain only when this node does not know them yet (not up to
``full_every`` of them again for every checkpoint).
- ``reusable``: the parts of the base that a new delta may name instead of uploading again.
"""

from __future__ import annotations

from collections.abc import Iterable

from checkpoints.errors import CorruptCheckpoint
from checkpoints.known import KnownManifests
from checkpoints.manifest import Manifest, Part
from checkpoints.read import read_manifest
from checkpoints.stores import CheckpointStore

# Deltas between two full checkpoints. At a checkpoint every 20 s (1,000 entries/s), a full
# one every 10 minutes: its O(state) dump (~13 s of CPU with an hour of runs held, NOISY) is
# spread over 31 writes, and a restore reads one full checkpoint and at most 30 deltas of
# 20,000 entries each (a few MB each), which costs less than replaying 600,000 entries.
FULL_EVERY_DELTAS = 30
CHAIN_MAX = 1000  # links a restore follows at most (``full_every`` is at most this)


def plan(
    store: CheckpointStore,
    base: int | None,
    *,
    key: bytes | None = None,
    full_every: int = FULL_EVERY_DELTAS,
    base_digest: str | None = None,
    known: KnownManifests | None = None,
) -> tuple[tuple[int, ...], Manifest | None]:
    """The chain of a delta on ``base`` and the base's manifest, or ``((), None)``: write a
    full checkpoint (no base, none valid in the store, a digest other than ours, a broken
    chain, or ``full_every`` deltas already). The base's manifest is read from the store;
    the links of its chain in ``known`` are not read again, those read are added to it."""
    if base is None or full_every < 1:
        return (), None
    known = KnownManifests() if known is None else known
    try:
        manifest = read_manifest(store, base, key)
    except CorruptCheckpoint:
        known.forget(store, [base])  # gone or damaged since: no longer a checkpoint here
        return (), None
    known.add(store, manifest, key)
    try:
        links = resolve(store, manifest, key, known)
    except CorruptCheckpoint:
        return (), None
    if base_digest is not None and manifest.digest and manifest.digest != base_digest:
        return (), None
    chain = tuple(m.offset for m in links)
    if len(chain) > full_every:  # the base is already the full_every-th delta
        return (), None
    return chain, manifest


def resolve(
    store: CheckpointStore,
    manifest: Manifest,
    key: bytes | None = None,
    known: KnownManifests | None = None,
) -> list[Manifest]:
    """The manifests to restore ``manifest``: its base's, recursively (the full one first),
    then itself. Bases are followed as the store holds them now: any valid checkpoint at an
    offset holds the same state (all nodes capture at the same offsets), so a base another
    node wrote again, even as a full one, serves alike. Raises ``CorruptCheckpoint`` naming
    the link when one is missing or damaged. Links in ``known`` are not read again; those
    read are added to it."""
    known = KnownManifests() if known is None else known
    found = [manifest]
    while found[-1].chain:
        if len(found) > CHAIN_MAX:
            raise CorruptCheckpoint(f"delta {manifest.offset} has a chain over {CHAIN_MAX} long")
        base = found[-1].chain[-1]
        try:
            link = known.read(store, base, key)
        except CorruptCheckpoint as exc:
            raise CorruptCheckpoint(
                f"delta {manifest.offset} needs checkpoint {base}, which is unusable: {exc}"
            ) from None
        found.append(link)
    return found[::-1]


def reusable(base: Manifest, immutable: Iterable[str], chain: tuple[int, ...]) -> dict[str, Part]:
    """The parts of ``base`` (its own or those it names in turn, in a folder of the new
    delta's ``chain``) holding files the delta has at the same relative path, of those
    ``immutable`` names (files that never change once made): relative path -> the part, its
    ``folder`` set."""
    by_rel = {_relative(p.path): p for p in base.parts}
    out = {}
    for rel in immutable:
        part = by_rel.get(rel)
        if part is None:
            continue
        folder = base.offset if part.folder is None else part.folder
        if folder in chain:
            out[rel] = Part(part.path, part.size, part.sha256, folder)
    return out


def needed(manifests: Iterable[Manifest]) -> set[int]:
    """Every offset the chains of ``manifests`` name as written (which hold the folders of
    every part they reference: ``Manifest.from_bytes`` checks it); ``resolve`` of each gives
    the chains as the store holds them now."""
    return {o for m in manifests for o in m.chain}


def _relative(part_path: str) -> str:
    """A part's path as the state machine wrote it (without the ``parts-<token>/`` folder)."""
    return part_path.split("/", 1)[1] if "/" in part_path else part_path
