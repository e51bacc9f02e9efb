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

Candidates are the decided runs the run store holds, in (decided offset, run id) order; a
decided run the store has not confirmed waits apart (``awaiting_store``) and joins the
candidates, at its place, when an ``EffectsDone`` confirms it. So a long run-store outage that
leaves many runs unconfirmed never stands in front of stored ones: each entry examines at most
``runs_scanned_per_entry_max`` of the oldest stored candidates past the horizon and removes at
most ``runs_evicted_per_entry_max``; one still held by dedup is passed over and examined again
by later entries. Both sets are the same on every replica and rebuilt from DuckDB on restore.
Every condition above only ever turns true, so which rows an entry removes is a function of
the replicated state and the entry alone: replicas remove the same rows at the same entry and
their digests stay equal. The caller stages through ``decided`` / ``select`` during apply and
calls ``commit`` only once the entry applied.
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Any

import duckdb
from sortedcontainers import SortedList

from runner.errors import InvariantViolation
from runner.state.digest import stored_hash

# Per entry. The leader confirms stored runs every ~100 ms, so more than arrive in between.
runs_evicted_per_entry_max = 4_096
runs_scanned_per_entry_max = 8_192
RUN_RETENTION_MS_DEFAULT = 3_600_000

Candidate = tuple[int, int, str, str]  # (decided ts, decided offset, run id, event id)
# (decided offset, run id, decided ts, event id, the sum of its rows' hashes but stored_offset,
# stored_offset): sorts right; the last two keep the digest (``runner.state.digest``)
_Held = tuple[int, str, int, str, int, int]


class FinishedRuns:
    """Decided runs still in DuckDB: those the run store holds, oldest first, and apart those
    whose final version it has not confirmed yet."""

    def __init__(self, retention_ms: int = RUN_RETENTION_MS_DEFAULT) -> None:
        self.retention_ms = retention_ms
        self._stored: SortedList = SortedList()  # of _Held
        self._unstored: dict[str, _Held] = {}  # run id -> its candidate, until confirmed

    def __len__(self) -> int:
        return len(self._stored) + len(self._unstored)

    @property
    def unstored(self) -> int:
        """Decided runs waiting for the run store to confirm them (any thread may read it)."""
        return len(self._unstored)

    def candidates(self) -> list[Candidate]:
        """Every decided run held, in (decided offset, run id) order."""
        return [(ts, offset, run_id, event_id) for offset, run_id, ts, event_id, *_
                in sorted([*self._stored, *self._unstored.values()])]

    # ------------------------------------------------------------ during apply (staged)
    @staticmethod
    def decided(stage: Any, ts: int, offset: int, run_id: str, event_id: str) -> None:
        stage.finished.append((ts, offset, run_id, event_id))

    def select(self, stage: Any, ts: int, seen: dict[str, int]) -> None:
        """Stage the runs this entry removes (``stage.runs_evicted``). ``stage.stored`` holds
        this entry's confirmations; ``seen`` maps each held event id to its sighting's offset."""
        horizon = ts - self.retention_ms
        evicted = stage.runs_evicted
        oldest = heapq.merge(self._stored.islice(0, runs_scanned_per_entry_max),
                             sorted(self._confirmed(stage)))
        for offset, run_id, decided_ts, event_id, *_ in islice(oldest,
                                                               runs_scanned_per_entry_max):
            if decided_ts > horizon or len(evicted) >= runs_evicted_per_entry_max:
                break
            sighting = seen.get(event_id)
            if sighting is not None and sighting <= offset:
                continue  # a duplicate of its event would still be answered with this run
            evicted.append((run_id, offset, decided_ts))

    def _confirmed(self, stage: Any) -> list[_Held]:
        """The unstored runs this entry's confirmations cover (their final version)."""
        out = []
        for run_id, offset in stage.stored.items():
            held = self._unstored.get(run_id)
            if held is not None and offset >= held[0]:
                out.append(held)
        return out

    # ------------------------------------------------------------ once the entry applied
    def commit(self, stage: Any, entities: dict[str, tuple[int, int]]) -> int:
        """Absorb the entry; ``entities``: each run it decided -> (the sum of its rows' hashes
        but stored_offset, its stored_offset). Returns the change of the digest's sum (the
        stored_offsets confirmed, the runs evicted)."""
        delta = 0
        if stage.stored:  # an EffectsDone's confirmations (an order's entry has none)
            delta += self._commit_confirmed(stage)
        for run_id, offset, _ in stage.runs_evicted:
            at = self._stored.bisect_left((offset, run_id))
            if at == len(self._stored) or self._stored[at][1] != run_id:
                raise InvariantViolation(f"run {run_id} left but was no stored candidate")
            held = self._stored[at]
            delta -= held[4] + stored_hash(run_id, held[5])
            del self._stored[at]
        unstored = self._unstored
        for ts, offset, run_id, event_id in stage.finished:
            entity, stored = entities[run_id]
            unstored[run_id] = (offset, run_id, ts, event_id, entity, stored)
        return delta

    def _commit_confirmed(self, stage: Any) -> int:
        """The stored_offsets the entry's confirmations set; returns the digest's change."""
        delta = 0
        for held in self._confirmed(stage):  # stored_offset becomes the decided offset (a
            run_id, offset = held[1], held[0]  # confirmation never names a later version)
            del self._unstored[run_id]
            delta += stored_hash(run_id, offset) - stored_hash(run_id, held[5])
            self._stored.add((*held[:5], offset))
        for run_id, confirmed in stage.stored.items():  # an earlier version's confirmation
            held = self._unstored.get(run_id)
            if held is not None and confirmed > held[5]:
                delta += stored_hash(run_id, confirmed) - stored_hash(run_id, held[5])
                self._unstored[run_id] = (*held[:5], confirmed)
        return delta

    # ------------------------------------------------------------ restore
    def rebuild(self, con: duckdb.DuckDBPyConnection, entities: dict[str, int]) -> None:
        """From DuckDB; ``entities``: run id -> the sum of its rows' hashes (``digest.scan``)."""
        rows = con.execute("SELECT updated_ts, offset_, run_id, event_id, stored_offset "
                           "FROM runs WHERE state = 'decided' ORDER BY offset_, run_id"
                           ).fetchall()
        self._stored = SortedList((offset, run_id, ts, event_id, entities[run_id], stored)
                                  for ts, offset, run_id, event_id, stored in rows
                                  if stored >= offset)
        self._unstored = {run_id: (offset, run_id, ts, event_id, entities[run_id], stored)
                          for ts, offset, run_id, event_id, stored in rows if stored < offset}
