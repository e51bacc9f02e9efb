"""Names inside a store: one folder per checkpoint, named by its log offset, plus the manifest.

Folders are zero-padded so that a plain listing of the store sorts by offset; any folder name
that is not such a number is not a checkpoint and is ignored.
"""

from __future__ import annotations

import posixpath

from checkpoints.errors import InvariantViolation

MANIFEST_NAME = "MANIFEST.json"
OFFSET_DIGITS = 20  # an int64 offset needs at most 19 digits
PARTS_DIR_PREFIX = "parts-"


def folder_name(offset: int) -> str:
    """The folder holding the checkpoint taken at ``offset`` (the last applied log offset)."""
    if offset < 0:
        raise InvariantViolation(f"a checkpoint offset is >= 0, got {offset}")
    return f"{offset:0{OFFSET_DIGITS}d}"


def parse_folder(name: str) -> int | None:
    """The offset a folder name stands for, or None when the folder is not a checkpoint."""
    name = name.rstrip("/")
    if len(name) != OFFSET_DIGITS or not name.isdigit():
        return None
    return int(name)


def manifest_key(offset: int) -> str:
    return f"{folder_name(offset)}/{MANIFEST_NAME}"


def part_key(offset: int, relative_path: str) -> str:
    return f"{folder_name(offset)}/{check_relative(relative_path)}"


def check_relative(path: str) -> str:
    """Reject paths that would escape the checkpoint folder (a manifest is read from outside)."""
    norm = posixpath.normpath(path)
    if (
        not path
        or path.startswith("/")
        or norm != path
        or norm == ".."
        or norm.startswith("../")
        or "\\" in path
    ):
        raise ValueError(f"not a plain relative part path: {path!r}")
    return path
