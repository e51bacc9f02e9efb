"""Inspect a checkpoint store: ``python -m checkpoints ls|verify|prune URL``.

``ls`` lists each folder with its manifest (or why it is not a checkpoint); ``verify``
downloads the parts of one checkpoint (the newest by default) and checks sizes and sha256
without restoring anything; ``prune`` applies retention. Exit status 1 when verify fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from checkpoints.errors import CorruptCheckpoint
from checkpoints.read import fetch_parts, list_offsets, read_manifest
from checkpoints.retention import prune
from checkpoints.urls import store_from_url


def _ls(url: str) -> int:
    store = store_from_url(url)
    print(f"{'offset':>20}  {'writer':>6}  {'created (UTC)':19}  {'parts':>5}  {'bytes':>12}  node")
    for offset in list_offsets(store):
        try:
            m = read_manifest(store, offset)
        except CorruptCheckpoint as exc:
            print(f"{offset:>20}  not a checkpoint: {exc}")
            continue
        created = datetime.fromtimestamp(m.created_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        print(
            f"{offset:>20}  {m.writer_id:>6}  {created:19}  {len(m.parts):>5}  "
            f"{m.total_bytes:>12}  {m.writer_node}"
        )
    return 0


def _verify(url: str, offset: int | None) -> int:
    store = store_from_url(url)
    offsets = list_offsets(store) if offset is None else [offset]
    for o in offsets:
        scratch = Path(tempfile.mkdtemp(prefix="verify-"))
        try:
            m = read_manifest(store, o)
            fetch_parts(store, m, scratch)
        except CorruptCheckpoint as exc:
            print(f"{o}: CORRUPT: {exc}")
            if offset is not None:
                return 1
            continue
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"{o}: ok ({len(m.parts)} parts, {m.total_bytes} bytes, digest {m.digest})")
        return 0
    print("no valid checkpoint")
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m checkpoints", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ls").add_argument("url")
    v = sub.add_parser("verify")
    v.add_argument("url")
    v.add_argument("--offset", type=int, default=None)
    p = sub.add_parser("prune")
    p.add_argument("url")
    p.add_argument("--retain", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "ls":
        return _ls(args.url)
    if args.cmd == "verify":
        return _verify(args.url, args.offset)
    deleted = prune(store_from_url(args.url), args.retain)
    print(f"deleted {deleted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
