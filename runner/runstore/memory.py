"""An in-memory run store with the same keys as the real ones (tests and ``run_store=memory``)."""

from __future__ import annotations

import bisect
import threading

from runner.runstore import keys
from runner.runstore.base import RunRecord, lookup_runs_max


class MemoryRunStore:
    def __init__(self) -> None:
        self._rows: dict[bytes, bytes] = {}
        self._index: list[bytes] = []  # sorted index keys
        self._lock = threading.Lock()

    def put_many(self, runs: list[RunRecord], writer_id: int | None = None) -> None:
        with self._lock:
            for run in runs:
                key = keys.run_key(run.run_id)
                old = self._rows.get(key)
                if not run.newer_than(None if old is None else RunRecord.from_json(old)):
                    continue
                self._rows[key] = run.to_json()
                for kind, value in run.index_values():
                    ikey = keys.index_key(kind, value, run.run_id)
                    pos = bisect.bisect_left(self._index, ikey)
                    if pos == len(self._index) or self._index[pos] != ikey:
                        self._index.insert(pos, ikey)

    def get(self, run_id: str) -> RunRecord | None:
        raw = self._rows.get(keys.run_key(run_id))
        return None if raw is None else RunRecord.from_json(raw)

    def lookup(self, kind: str, value: str, limit: int = lookup_runs_max) -> list[RunRecord]:
        prefix = keys.index_prefix(kind, value)
        out: list[RunRecord] = []
        with self._lock:
            pos = bisect.bisect_left(self._index, prefix)
            while pos < len(self._index) and self._index[pos].startswith(prefix):
                if len(out) >= min(limit, lookup_runs_max):
                    break
                run = self.get(keys.run_id_of_index_key(self._index[pos]))
                if run is not None:
                    out.append(run)
                pos += 1
        return out

    def close(self) -> None:
        pass
