"""Test doubles around the real stores: a blob state machine, a store that can be held or
made to fail, and byte flipping inside a stored object."""

from __future__ import annotations

import hashlib
import json
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
            if p.is_file() and p.name not in ("APPLIED", "DELTA")
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


class DeltaBlobStateMachine(BlobStateMachine):
    """Blobs with delta snapshots: the names set or deleted since the last capture. Blobs
    under ``seg/`` are never changed once set (like the metrics engine's rolled segments):
    every snapshot writes them all and names them ``immutable``."""

    def __init__(self) -> None:
        super().__init__()
        self.changed: set[str] = set()
        self.since: int | None = None

    def set(self, offset: int, name: str, data: bytes) -> None:
        super().set(offset, name, data)
        self.changed.add(name)

    def delete(self, offset: int, name: str) -> None:
        del self.blobs[name]
        self.changed.add(name)
        self._applied = offset

    def snapshot(self) -> _DeltaBlobWriter:
        writer = _DeltaBlobWriter(dict(self.blobs), self._applied, self.changed, self.since)
        self.changed, self.since = set(), self._applied
        return writer

    def restore_chain(self, dirs: list[Path]) -> None:
        self.restore(dirs[0])
        for d in dirs[1:]:
            meta = json.loads((d / "DELTA").read_text())
            assert meta["base"] == self._applied, (meta, self._applied)
            for name in meta["deleted"]:
                self.blobs.pop(name, None)
            for name in meta["set"]:
                self.blobs[name] = (d / name).read_bytes()
            self._applied = int((d / "APPLIED").read_text())
        self.changed, self.since = set(), self._applied

    def restore(self, dir: Path) -> None:
        super().restore(dir)
        self.changed, self.since = set(), self._applied


class _DeltaBlobWriter(_BlobWriter):
    def __init__(self, blobs: dict[str, bytes], applied: int, changed: set[str],
                 since: int | None) -> None:
        super().__init__(blobs, applied)
        self.changed = changed
        self.delta_base = since

    def write_delta(self, dir: Path) -> None:
        names = sorted(n for n in self.changed if n in self.blobs) + sorted(
            n for n in self.blobs if n.startswith("seg/") and n not in self.changed)
        for name in names:
            (dir / name).parent.mkdir(parents=True, exist_ok=True)
            (dir / name).write_bytes(self.blobs[name])
        (dir / "APPLIED").write_text(str(self.applied))
        (dir / "DELTA").write_text(json.dumps({
            "base": self.delta_base, "set": names,
            "deleted": sorted(n for n in self.changed if n not in self.blobs)}))

    @staticmethod
    def immutable(dir: Path) -> list[str]:
        return [p.relative_to(dir).as_posix() for p in sorted((dir / "seg").rglob("*"))
                if p.is_file()]


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
    return [f"{folder_name(offset if p.folder is None else p.folder)}/{p.path}" for p in m.parts]
