"""The checkpoint manifest: what a checkpoint holds, and the checksums that prove it is whole.

``MANIFEST.json`` is written last, after every part; it names the log offset the state was
captured at, the writer id of the log at that point, the capture time, the state machine's
digest, and each part's relative path, size and sha256. The manifest carries a sha256 of its
own canonical body, so a flipped byte anywhere in it is caught too.

With a key, the manifest also carries an HMAC-SHA256 of that body (``manifest_hmac``), and a
reader holding the key refuses a manifest without a valid one: since the manifest pins every
part's sha256, nothing of a checkpoint is read (e.g. engine state that holds pickles) unless a
holder of the cluster's key wrote it. ``writer_id``/``writer_seq`` are the log's fence at the
offset; a restored node seeds its fence with both.

Two formats (``format``): ``railflow-checkpoint/1`` is a full checkpoint, whole by itself.
``railflow-checkpoint/2`` is a delta (``checkpoints.chain``): its ``chain`` lists the offsets
of the checkpoints it applies on, oldest first: a full one, then the deltas after it; the
last is its base, the capture it is relative to. A delta's part may name the ``folder``
(offset) of an earlier checkpoint of its chain that holds it (a file uploaded once and
referenced since); without it a part is in the manifest's own folder. A full manifest never
has a chain nor such parts, and reads as before; a reader that knows only format 1 refuses a
delta instead of restoring half of a state.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.errors import CorruptCheckpoint
from checkpoints.layout import check_relative

FORMAT = "railflow-checkpoint/1"
FORMAT_DELTA = "railflow-checkpoint/2"
MANIFEST_BYTES_MAX = 4 * 1024 * 1024
PARTS_MAX = 10_000
HASH_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Part:
    path: str  # relative to the checkpoint folder, '/'-separated
    size: int
    sha256: str
    folder: int | None = None  # the offset of the checkpoint holding it (None: this one)


@dataclass(frozen=True)
class Manifest:
    offset: int
    writer_id: int
    created_at_ms: int
    digest: str
    parts: tuple[Part, ...]
    writer_node: str = ""
    writer_seq: int = -1  # -1: a manifest from before the fence's seq was recorded
    format: str = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)
    chain: tuple[int, ...] = ()  # a delta's full checkpoint and deltas, oldest first

    @property
    def base(self) -> int | None:
        """The offset this delta is relative to; None for a full checkpoint."""
        return self.chain[-1] if self.chain else None

    @property
    def total_bytes(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def uploaded_bytes(self) -> int:
        """The bytes of the parts in this checkpoint's own folder (the others are referenced)."""
        return sum(p.size for p in self.parts if p.folder is None)

    def to_bytes(self, key: bytes | None = None) -> bytes:
        body = _body(self)
        canonical = _canonical(body)
        body["manifest_sha256"] = hashlib.sha256(canonical).hexdigest()
        if key is not None:
            body["manifest_hmac"] = hmac.new(key, canonical, hashlib.sha256).hexdigest()
        return json.dumps(body, indent=1, sort_keys=True).encode() + b"\n"

    @staticmethod
    def from_bytes(
        data: bytes, *, expected_offset: int | None = None, key: bytes | None = None
    ) -> Manifest:
        """Parse and self-check a manifest; raise CorruptCheckpoint with the reason otherwise.

        With ``key``, the manifest must carry a valid HMAC under it."""
        if len(data) > MANIFEST_BYTES_MAX:
            raise CorruptCheckpoint(f"manifest is {len(data)} bytes, over {MANIFEST_BYTES_MAX}")
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptCheckpoint(f"manifest is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise CorruptCheckpoint("manifest is not a JSON object")
        claimed = body.pop("manifest_sha256", None)
        signed = body.pop("manifest_hmac", None)
        canonical = _canonical(body)
        actual = hashlib.sha256(canonical).hexdigest()
        if claimed != actual:
            raise CorruptCheckpoint(f"manifest checksum mismatch ({claimed} != {actual})")
        if key is not None:
            want = hmac.new(key, canonical, hashlib.sha256).hexdigest()
            if not isinstance(signed, str) or not hmac.compare_digest(signed, want):
                raise CorruptCheckpoint("manifest is not signed with this cluster's key")
        if body.get("format") not in (FORMAT, FORMAT_DELTA):
            raise CorruptCheckpoint(f"unknown manifest format {body.get('format')!r}")
        try:
            parts = tuple(
                Part(path=check_relative(p["path"]), size=int(p["size"]), sha256=str(p["sha256"]),
                     folder=None if p.get("folder") is None else int(p["folder"]))
                for p in body["parts"]
            )
            manifest = Manifest(
                offset=int(body["offset"]),
                writer_id=int(body["writer_id"]),
                created_at_ms=int(body["created_at_ms"]),
                digest=str(body["digest"]),
                parts=parts,
                writer_node=str(body.get("writer_node", "")),
                writer_seq=int(body.get("writer_seq", -1)),
                extra=dict(body.get("extra", {})),
                format=str(body["format"]),
                chain=tuple(int(o) for o in body.get("chain", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpoint(f"manifest field missing or malformed: {exc}") from None
        _check_chain(manifest)
        if len(parts) > PARTS_MAX:
            raise CorruptCheckpoint(f"manifest lists {len(parts)} parts, over {PARTS_MAX}")
        if expected_offset is not None and manifest.offset != expected_offset:
            raise CorruptCheckpoint(
                f"manifest says offset {manifest.offset} but sits in folder {expected_offset}"
            )
        return manifest


def _check_chain(m: Manifest) -> None:
    """A delta names a chain of earlier offsets, increasing; a full one none; a part's folder
    is one of the chain's."""
    if (m.format == FORMAT_DELTA) != bool(m.chain):
        raise CorruptCheckpoint(
            f"manifest of format {m.format} with a chain of {len(m.chain)} checkpoints")
    links = (*m.chain, m.offset)
    if any(a >= b for a, b in zip(links, links[1:], strict=False)):
        raise CorruptCheckpoint(f"chain {list(m.chain)} does not increase to {m.offset}")
    for p in m.parts:
        if p.folder is not None and p.folder not in m.chain:
            raise CorruptCheckpoint(f"part {p.path} is in folder {p.folder}, not in the chain")


def _body(m: Manifest) -> dict[str, Any]:
    """The manifest as JSON; ``chain`` and a part's ``folder`` only when set (a full
    manifest's body is as before they existed)."""
    body = asdict(m)
    body["parts"] = [{k: v for k, v in asdict(p).items() if k != "folder" or v is not None}
                     for p in m.parts]
    if not m.chain:
        del body["chain"]
    body["total_bytes"] = m.total_bytes
    return body


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def hash_file(path: Path) -> tuple[int, str]:
    """Size and sha256 of a local file, read in bounded chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def scan_parts(
    parts_root: Path, prefix: str, reuse: Mapping[str, Part] | None = None
) -> list[tuple[Path | None, Part]]:
    """Every file under ``parts_root`` (recursively), as (local path, Part named prefix/rel).

    ``reuse`` maps a relative path to a part of an earlier checkpoint (its ``folder`` set)
    holding that same file: such a file of the same size is named by that part, neither
    hashed nor to be uploaded (its local path is None)."""
    reuse = reuse or {}
    found: list[tuple[Path | None, Part]] = []  # None: referenced, not uploaded
    for path in sorted(p for p in parts_root.rglob("*") if p.is_file()):
        rel = path.relative_to(parts_root).as_posix()
        earlier = reuse.get(rel)
        if earlier is not None and earlier.folder is not None \
                and earlier.size == path.stat().st_size:
            found.append((None, earlier))
        else:
            size, digest = hash_file(path)
            found.append((path, Part(path=check_relative(f"{prefix}/{rel}"), size=size,
                                     sha256=digest)))
        if len(found) > PARTS_MAX:
            raise ValueError(f"a checkpoint holds at most {PARTS_MAX} parts")
    return found
