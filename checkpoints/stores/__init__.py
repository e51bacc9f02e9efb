"""Where checkpoints live: a local directory, S3, or HDFS over WebHDFS, behind one protocol.

A store is rooted at a prefix; keys are '/'-separated paths below it. ``put_bytes`` must make
the object visible all at once (the manifest relies on it); ``put_file`` streams a local file
of any size. Missing keys raise ``FileNotFoundError``; other failures raise
``CheckpointStoreError`` or the client's own exception.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class CheckpointStore(Protocol):
    url: str

    def put_file(self, key: str, src: Path) -> None:
        """Upload a local file (streamed or multipart for large files)."""

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write a small object atomically: readers see all of it or nothing."""

    def get_file(self, key: str, dst: Path) -> None:
        """Download an object into a local file."""

    def get_bytes(self, key: str, size_max: int) -> bytes:
        """Read a small object; refuse objects over size_max bytes."""

    def exists(self, key: str) -> bool: ...

    def list_dirs(self) -> list[str]:
        """Names of the folders directly under the root (no trailing slash)."""

    def delete_file(self, key: str) -> None:
        """Delete one object; no error when it is already gone."""

    def delete_dir(self, name: str) -> None:
        """Delete a folder under the root and everything in it."""
