"""The embedded run store: RocksDB through rocksdict, one key space, the keys of ``keys``."""

from __future__ import annotations

import threading
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from runner.runstore import keys
from runner.runstore.base import RunRecord, lookup_runs_max


class RocksRunStore:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(path), options)
        self._lock = threading.Lock()  # read-compare-write of one run must not interleave

    def put_many(self, runs: list[RunRecord], writer_id: int | None = None) -> None:
        if not runs:
            return
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            for run in runs:
                key = keys.run_key(run.run_id)
                old = self._db.get(key)
                if not run.newer_than(None if old is None else RunRecord.from_json(old)):
                    continue
                batch.put(key, run.to_json())
                for ikey in run.index_keys():
                    batch.put(ikey, b"")
            self._db.write(batch)

    def get(self, run_id: str) -> RunRecord | None:
        raw = self._db.get(keys.run_key(run_id))
        return None if raw is None else RunRecord.from_json(raw)

    def lookup(self, kind: str, value: str, limit: int = lookup_runs_max) -> list[RunRecord]:
        prefix = keys.index_prefix(kind, value)
        out: list[RunRecord] = []
        it = self._db.iter()
        it.seek(prefix)
        while it.valid() and len(out) < min(limit, lookup_runs_max):
            key = it.key()
            if not key.startswith(prefix):
                break
            run = self.get(keys.run_id_of_index_key(key))
            if run is not None:
                out.append(run)
            it.next()
        del it
        return out

    def close(self) -> None:
        self._db.close()
