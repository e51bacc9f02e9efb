"""A checkpoint store in a local directory (the embedded default).

Files are written under a temporary name, fsynced, then renamed, so a reader never sees half a
file; parts are hard-linked from the scratch folder when it is on the same file system.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from checkpoints.layout import check_relative


class LocalStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root / check_relative(key)

    def put_file(self, key: str, src: Path) -> None:
        dst = self._path(key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            os.link(src, tmp)  # same file system: no copy at all
        except OSError:
            shutil.copyfile(src, tmp)
        _fsync(tmp)
        os.replace(tmp, dst)

    def put_bytes(self, key: str, data: bytes) -> None:
        dst = self._path(key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp-{uuid.uuid4().hex[:8]}")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
        _fsync(dst.parent)

    def get_file(self, key: str, dst: Path) -> None:
        shutil.copyfile(self._path(key), dst)

    def get_bytes(self, key: str, size_max: int) -> bytes:
        path = self._path(key)
        size = path.stat().st_size
        if size > size_max:
            raise ValueError(f"{key} is {size} bytes, over {size_max}")
        return path.read_bytes()

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_dirs(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def delete_file(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_dir(self, name: str) -> None:
        shutil.rmtree(self._path(name), ignore_errors=True)

    def __repr__(self) -> str:
        return f"LocalStore({self.url})"


def _fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
