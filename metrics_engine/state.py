"""Aggregation state: one bundle per (group node, group key), in RocksDB behind a cache.

A bundle maps a state node id to that key's state object (see aggregations.py). Bundles live
in an in-memory write-back cache of at most ``cache_entries_max`` entries; the oldest entries
are written to RocksDB (rocksdict) when it overflows, and everything is written on ``flush``.
A bundle whose states are all empty is deleted, so state does not grow with keys that left
every window. Without a path the store is memory-only (offline computation).

The caller must ``flush`` before ``checkpoint`` or iterating with ``items``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from rocksdict import Checkpoint, Options, Rdict, WriteBatch

CACHE_ENTRIES_MAX = 500_000
EVICT_FRACTION = 8  # evict 1/8 of the cache at once: amortises the write batch


class Bundle(dict):
    """sid -> state; ``in_db`` says whether RocksDB may hold a copy to delete."""

    __slots__ = ("in_db",)
    in_db: bool


def _tuplify(v: Any) -> Any:
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


def encode_key(gid: str, key: Any) -> bytes:
    return gid.encode() + b"\x00" + orjson.dumps(key)


def decode_key(raw: Any) -> tuple[str, Any]:
    gid, _, rest = raw.partition(b"\x00")
    return gid.decode(), _tuplify(orjson.loads(rest))


class StateStore:
    """Bundles by (gid, key). ``path`` None keeps everything in memory."""

    def __init__(self, path: Path | None, cache_entries_max: int = CACHE_ENTRIES_MAX):
        self.cache_entries_max = cache_entries_max
        self.cache: dict[tuple[str, Any], Bundle] = {}
        self.db: Rdict | None = None
        if path is not None:
            opts = Options(raw_mode=True)
            opts.create_if_missing(True)
            self.db = Rdict(str(path), opts)
            self._opts = opts
        # True while the cache holds every bundle the database holds: a cache miss is then a
        # miss in the database too, and no lookup is needed (most keys are new in a window).
        self.complete = True
        if self.db is not None:
            for raw, value in self.db.items():
                if len(self.cache) >= cache_entries_max:
                    self.complete = False
                    break
                b = Bundle(pickle.loads(value))
                b.in_db = True
                self.cache[decode_key(raw)] = b

    def get(self, gid: str, key: Any) -> Bundle:
        """The bundle of (gid, key), created empty if missing."""
        ck = (gid, key)
        b = self.cache.get(ck)
        if b is None:
            b = self._load(ck)
            if b is None:
                b = Bundle()
                b.in_db = False
            self.cache[ck] = b
            if len(self.cache) > self.cache_entries_max:
                self._evict()
        return b

    def peek(self, gid: str, key: Any) -> Bundle | None:
        ck = (gid, key)
        b = self.cache.get(ck)
        if b is None and not self.complete:
            b = self._load(ck)
            if b is not None:
                self.cache[ck] = b
                if len(self.cache) > self.cache_entries_max:
                    self._evict()
        return b

    def delete(self, gid: str, key: Any) -> None:
        b = self.cache.pop((gid, key), None)
        if b is not None and b.in_db and self.db is not None:
            self.db.delete(encode_key(gid, key))

    def _load(self, ck) -> Bundle | None:
        if self.complete:
            return None
        assert self.db is not None  # complete is True without a database
        raw = self.db.get(encode_key(*ck))
        if raw is None:
            return None
        b = Bundle(pickle.loads(raw))
        b.in_db = True
        return b

    def _evict(self) -> None:
        if self.db is None:
            return  # memory-only: nowhere to spill
        db = self.db
        self.complete = False
        n = max(1, len(self.cache) // EVICT_FRACTION)
        batch = WriteBatch(raw_mode=True)
        it = iter(self.cache)
        victims = [next(it) for _ in range(n)]
        for ck in victims:
            batch.put(encode_key(*ck), pickle.dumps(dict(self.cache.pop(ck)), protocol=5))
        db.write(batch)

    def flush(self) -> None:
        """Write every cached bundle to RocksDB (they stay cached)."""
        if self.db is None:
            return
        batch = WriteBatch(raw_mode=True)
        for ck, b in self.cache.items():
            batch.put(encode_key(*ck), pickle.dumps(dict(b), protocol=5))
            b.in_db = True
        self.db.write(batch)
        self.db.flush()

    def items(self) -> Iterator[tuple[str, Any, dict]]:
        """Every (gid, key, bundle), ordered by encoded key. Flush first."""
        if self.db is None:
            for ck in sorted(self.cache, key=lambda ck: encode_key(*ck)):
                yield ck[0], ck[1], self.cache[ck]
            return
        for raw, value in self.db.items():
            gid, key = decode_key(raw)
            b = self.cache.get((gid, key))
            yield gid, key, b if b is not None else pickle.loads(value)

    def drop_state(self, gid: str, sid: str) -> None:
        """Remove one state node's states from every bundle of ``gid``."""
        self.flush()
        for g, key, bundle in list(self.items()):
            if g == gid and sid in bundle:
                b = self.get(g, key)
                b.pop(sid, None)
                if not b:
                    self.delete(g, key)
        self.flush()

    def drop_group(self, gid: str) -> None:
        for ck in [ck for ck in self.cache if ck[0] == gid]:
            del self.cache[ck]
        if self.db is not None:
            prefix = gid.encode()
            self.db.delete_range(prefix + b"\x00", prefix + b"\x01")

    def checkpoint(self, dest: Path) -> None:
        self.flush()
        if self.db is None:
            raise ValueError("a memory-only store has no checkpoint")
        Checkpoint(self.db).create_checkpoint(str(dest))

    def close(self) -> None:
        if self.db is not None:
            self.flush()
            self.db.close()
            self.db = None
