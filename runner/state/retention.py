"""Which finished runs leave the hot state (DuckDB), chosen inside apply from log time only.

A run leaves DuckDB (its ``runs``, ``steps``, ``decisions`` and ``app_tasks`` rows; a webhook's
``outbox`` row leaves once the webhook was sent, held run or not) once all of these hold:

- it is decided (a decided run has no open task: its app and review tasks are done or expired);
- the run store holds its final version: an ``EffectsDone`` confirmed the offset it was decided
  at (the same test as ``stored_offset >= offset_``);
- it was decided ``retention_ms`` or more of log time (``entry.ts``) before the ``EffectsDone``
  or ``Tick`` entry that removes it;
- the dedup set no longer holds the sighting of its event id that started it, so a duplicate
  always gets all its runs back from the hot state (``dedup_retention_ms`` bounds this too).

Candidates are the decided runs still held, in (decided offset, run id) order, the same on
every replica and rebuilt from DuckDB on restore. Each entry examines at most
``runs_scanned_per_entry_max`` of the oldest past the horizon and removes at most
``runs_evicted_per_entry_max``; a run not yet stored (or still held by dedup) is passed over and
examined again by later entries. Every condition above only ever turns true, so which rows an
entry removes is a function of the replicated state and the entry alone: replicas remove the
same rows at the same entry and their digests stay equal. The caller stages through
``decided`` / ``select`` during apply and calls ``commit`` only once the entry applied.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any

import duckdb

# Per entry. The leader confirms stored runs every ~100 ms, so more than arrive in between.
runs_evicted_per_entry_max = 4_096
runs_scanned_per_entry_max = 8_192
RUN_RETENTION_MS_DEFAULT = 3_600_000

Candidate = tuple[int, int, str, str]  # (decided ts, decided offset, run id, event id)


class FinishedRuns:
    """Decided runs still in DuckDB, oldest first, and those whose final version is unstored."""

    def __init__(self, retention_ms: int = RUN_RETENTION_MS_DEFAULT) -> None:
        self.retention_ms = retention_ms
        self._order: deque[Candidate] = deque()
        self._unstored: dict[str, int] = {}  # run id -> decided offset, until confirmed

    def __len__(self) -> int:
        return len(self._order)

    @property
    def unstored(self) -> int:
        return len(self._unstored)

    def candidates(self) -> list[Candidate]:
        return list(self._order)

    # ------------------------------------------------------------ during apply (staged)
    @staticmethod
    def decided(stage: Any, ts: int, offset: int, run_id: str, event_id: str) -> None:
        stage.finished.append((ts, offset, run_id, event_id))

    def select(self, stage: Any, ts: int, seen: dict[str, int]) -> None:
        """Stage the runs this entry removes (``stage.runs_evicted``). ``stage.stored`` holds
        this entry's confirmations; ``seen`` maps each held event id to its sighting's offset."""
        horizon = ts - self.retention_ms
        evicted = stage.runs_evicted
        scanned = 0
        for decided_ts, offset, run_id, event_id in islice(self._order,
                                                            runs_scanned_per_entry_max):
            if decided_ts > horizon or len(evicted) >= runs_evicted_per_entry_max:
                break
            scanned += 1
            if not self._stored(stage, run_id):
                continue  # the run store does not hold it yet: it stays, examined again later
            sighting = seen.get(event_id)
            if sighting is not None and sighting <= offset:
                continue  # a duplicate of its event would still be answered with this run
            evicted.append((run_id, offset, decided_ts))
        stage.runs_scanned = scanned

    def _stored(self, stage: Any, run_id: str) -> bool:
        decided_at = self._unstored.get(run_id)
        return decided_at is None or stage.stored.get(run_id, -1) >= decided_at

    # ------------------------------------------------------------ once the entry applied
    def commit(self, stage: Any) -> None:
        for run_id, offset in stage.stored.items():
            decided_at = self._unstored.get(run_id)
            if decided_at is not None and offset >= decided_at:
                del self._unstored[run_id]
        if stage.runs_scanned:
            gone = {run_id for run_id, _, _ in stage.runs_evicted}
            kept = [c for c in (self._order.popleft() for _ in range(stage.runs_scanned))
                    if c[2] not in gone]
            self._order.extendleft(reversed(kept))
        if stage.finished:
            for candidate in sorted(stage.finished, key=lambda c: c[2]):  # as restore orders
                self._order.append(candidate)
                self._unstored[candidate[2]] = candidate[1]

    # ------------------------------------------------------------ restore
    def rebuild(self, con: duckdb.DuckDBPyConnection) -> None:
        rows = con.execute("SELECT updated_ts, offset_, run_id, event_id, stored_offset "
                           "FROM runs WHERE state = 'decided' ORDER BY offset_, run_id"
                           ).fetchall()
        self._order = deque((ts, offset, run_id, event_id)
                            for ts, offset, run_id, event_id, _ in rows)
        self._unstored = {run_id: offset for _, offset, run_id, _, stored in rows
                          if stored < offset}
