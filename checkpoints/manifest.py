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
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.errors import CorruptCheckpoint
from checkpoints.layout import check_relative

FORMAT = "railflow-checkpoint/1"
MANIFEST_BYTES_MAX = 4 * 1024 * 1024
PARTS_MAX = 10_000
HASH_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Part:
    path: str  # relative to the checkpoint folder, '/'-separated
    size: int
    sha256: str


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

    @property
    def total_bytes(self) -> int:
        return sum(p.size for p in self.parts)

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
        if body.get("format") != FORMAT:
            raise CorruptCheckpoint(f"unknown manifest format {body.get('format')!r}")
        try:
            parts = tuple(
                Part(path=check_relative(p["path"]), size=int(p["size"]), sha256=str(p["sha256"]))
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
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpoint(f"manifest field missing or malformed: {exc}") from None
        if len(parts) > PARTS_MAX:
            raise CorruptCheckpoint(f"manifest lists {len(parts)} parts, over {PARTS_MAX}")
        if expected_offset is not None and manifest.offset != expected_offset:
            raise CorruptCheckpoint(
                f"manifest says offset {manifest.offset} but sits in folder {expected_offset}"
            )
        return manifest


def _body(m: Manifest) -> dict[str, Any]:
    body = asdict(m)
    body["parts"] = [asdict(p) for p in m.parts]
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


def scan_parts(parts_root: Path, prefix: str) -> list[tuple[Path, Part]]:
    """Every file under ``parts_root`` (recursively), as (local path, Part named prefix/rel)."""
    found: list[tuple[Path, Part]] = []
    for path in sorted(p for p in parts_root.rglob("*") if p.is_file()):
        rel = path.relative_to(parts_root).as_posix()
        size, digest = hash_file(path)
        found.append((path, Part(path=check_relative(f"{prefix}/{rel}"), size=size, sha256=digest)))
        if len(found) > PARTS_MAX:
            raise ValueError(f"a checkpoint holds at most {PARTS_MAX} parts")
    return found
