"""Test doubles around the real stores: a blob state machine, a store that can be held or
made to fail, and byte flipping inside a stored object."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from checkpoints.stores import CheckpointStore


class BlobStateMachine:
    """State = named byte strings (nested names allowed); one entry sets one blob."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self._applied = -1

    @property
    def applied_offset(self) -> int:
        return self._applied

    def set(self, offset: int, name: str, data: bytes) -> None:
        self.blobs[name] = data
        self._applied = offset

    def snapshot(self) -> _BlobWriter:
        return _BlobWriter(dict(self.blobs), self._applied)

    def restore(self, dir: Path) -> None:
        self.blobs = {
            p.relative_to(dir).as_posix(): p.read_bytes()
            for p in dir.rglob("*")
            if p.is_file() and p.name != "APPLIED"
        }
        self._applied = int((dir / "APPLIED").read_text())

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.blobs):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.blobs[name]).digest())
        h.update(str(self._applied).encode())
        return h.hexdigest()


class _BlobWriter:
    def __init__(self, blobs: dict[str, bytes], applied: int) -> None:
        self.blobs = blobs
        self.applied = applied

    def write(self, dir: Path) -> None:
        for name, data in self.blobs.items():
            (dir / name).parent.mkdir(parents=True, exist_ok=True)
            (dir / name).write_bytes(data)
        (dir / "APPLIED").write_text(str(self.applied))


class GatedStore:
    """Wraps a store; part uploads wait on ``gate`` and fail while ``fail`` is set."""

    def __init__(self, inner: CheckpointStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.gate = threading.Event()
        self.gate.set()
        self.fail = threading.Event()
        self.uploads_started = threading.Event()

    def put_file(self, key: str, src: Path) -> None:
        self.uploads_started.set()
        if not self.gate.wait(timeout=60):
            raise TimeoutError("gate never opened")
        if self.fail.is_set():
            raise OSError("injected upload failure")
        self.inner.put_file(key, src)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def flip_byte(store: CheckpointStore, key: str, tmp: Path, position: int = 0) -> None:
    """Flip one bit of one byte of a stored object, in place."""
    local = tmp / "flip.bin"
    store.get_file(key, local)
    data = bytearray(local.read_bytes())
    data[position % len(data)] ^= 0x01
    local.write_bytes(bytes(data))
    store.put_file(key, local)


def part_keys(store: CheckpointStore, offset: int) -> list[str]:
    from checkpoints import read_manifest
    from checkpoints.layout import folder_name

    m = read_manifest(store, offset)
    return [f"{folder_name(offset)}/{p.path}" for p in m.parts]
