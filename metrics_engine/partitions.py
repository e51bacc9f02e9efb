"""One engine's state built per key partition of a stream, in parallel, then merged.

A metric's state for a group key depends only on that key's events and on time, so a stream's
history can be split by group key and each part fed to its own plan (:class:`PartialState`),
in log order. Three things of an engine are global, and each is rebuilt exactly:

- **positions**: MIN/MAX and OLDEST states hold the positions of their events, which must be
  positions in the whole stream. The caller passes each event's global position;
  :meth:`PartialState.finish` rewrites the states natively (``StreamCore.renumber``).
- **time**: a partition's last event may be older than the stream's. ``finish`` moves every
  window to the stream's last time (evicting what the whole-stream engine evicted), and a
  window that excludes the current event takes the partition's last event unless it is the
  stream's last.
- **cursors and the reservoir**: a cursor's position depends only on the stream's timestamps;
  :func:`cursor_positions` computes it from counts of events at or before a few times
  (:func:`cursor_times`; a calendar window's head, which feeds no window, moves at most
  ``IDLE_STEP_MAX`` events per event, and the formula replays that). The reservoir holds
  every event in log order; ``reservoir.write_segment`` writes a range of positions, so the
  ranges are written in parallel.

The caller: :func:`prepare` an empty directory with every definition, write the stream's
events into :func:`reservoir_dir` (segments numbered in position order), build one
:class:`PartialState` per key partition of each set of metrics sharing key columns (a key in
one partition only), then :func:`assemble` the directory: it loads the partial states (a key
held twice is refused), places the cursors and leaves a clean engine directory, which is also
a snapshot ``Engine.restore`` reads. Same digest and values as one engine fed the whole
stream (``tests/pipeline/test_backfill.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from railflow_metrics_native import IDLE_STEP_MAX

from metrics_engine.engine import Engine, _stream_dir
from metrics_engine.errors import InvariantViolation
from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir

HOP_BUCKETS_MAX = 10_000_000  # calendar buckets between a stream's first and last event


def prepare(directory: str | Path, texts: Sequence[str]) -> None:
    """Start an engine directory to assemble: every definition, no event (each window starts
    at position 0, as in an engine that had them all from the first event)."""
    engine = Engine(directory, fsync=False)
    try:
        for text in texts:
            engine.define(text)
    finally:
        engine.close()


def reservoir_dir(directory: str | Path, stream: str) -> Path:
    """Where the stream's segment files go in an engine directory."""
    return Path(directory) / "reservoir" / _stream_dir(stream)


class PartialState:
    """The plan of ``texts`` (one stream) over a memory-only reservoir, fed the events of one
    key partition in log order, each with its position in the whole stream."""

    def __init__(self, texts: Sequence[str]):
        defs = [d for t in texts for d in parse(t)]
        streams = {d.stream for d in defs}
        if len(streams) != 1:
            raise InvariantViolation(f"a partial state serves one stream, got {sorted(streams)}")
        self.stream = streams.pop()
        self._plan = Plan(lambda _stream: StreamReservoir(None, None, None))
        for d in defs:
            self._plan.add(d)
        self._positions: list[np.ndarray] = []

    def ingest(self, ts: Any, columns: Any, positions: Any) -> None:
        """Feed a batch (as ``Engine.ingest_many``); ``positions``: each row's global one."""
        self._plan.ingest_many(self.stream, ts, columns)
        self._positions.append(np.asarray(positions, dtype=np.int64))

    def finish(self, last_ts: int, events: int) -> bytes:
        """The states as of the stream's end (``events`` events, the last at ``last_ts``), in
        global positions, as ``StreamCore.dump`` bytes. The partial state is spent after."""
        sp = self._plan.streams[self.stream]
        pos = np.concatenate(self._positions) if self._positions else np.zeros(0, np.int64)
        n = sp.res.next_pos
        if len(pos) != n:
            raise InvariantViolation(f"{len(pos)} positions for {n} events")
        if n and (pos[0] < 0 or pos[-1] >= events or np.any(np.diff(pos) <= 0)
                  or (sp.res.last_ts is not None and sp.res.last_ts > last_ts)):
            raise InvariantViolation("partition positions not increasing inside the stream")
        if n:
            if pos[-1] != events - 1:
                # Its last event is not the stream's: a window excluding the current event
                # took it when the next event came.
                for c in sp.cursors.values():
                    if c.spec == ("prev",):
                        sp.core.advance(c.cid, last_ts, n + 1)
            sp.core.advance_all(last_ts, n)
            sp.core.renumber(pos.tolist())
        return bytes(sp.core.dump())


def _bucket_bounds(spec: tuple, first_ts: int, last_ts: int) -> np.ndarray:
    """Start times of the calendar buckets from ``first_ts``'s to the one after ``last_ts``'s."""
    every, align = spec[1], spec[2]
    b0, b1 = (first_ts - align) // every, (last_ts - align) // every
    if b1 - b0 + 2 > HOP_BUCKETS_MAX:
        raise InvariantViolation(f"{b1 - b0 + 2} buckets of {every} ms exceed HOP_BUCKETS_MAX")
    return np.arange(b0, b1 + 2, dtype=np.int64) * every + align


def cursor_times(specs: Iterable[tuple], first_ts: int, last_ts: int) -> np.ndarray:
    """The times ``t`` (sorted, unique) whose counts of events with ``ts <= t``
    :func:`cursor_positions` needs."""
    out: list[np.ndarray] = []
    for spec in specs:
        if spec[0] == "le":
            out.append(np.array([last_ts - spec[1]], dtype=np.int64))
        elif spec[0] == "hop":
            starts = _bucket_bounds(spec, first_ts, last_ts)
            out += [starts - 1, starts - spec[3] - 1]
    return np.unique(np.concatenate(out)) if out else np.zeros(0, np.int64)


def cursor_positions(specs: Iterable[tuple], events: int, first_ts: int, last_ts: int,
                     count_le: Mapping[int, int]) -> dict[tuple, int]:
    """Where each cursor of ``specs`` stands after an engine (its windows defined before the
    first event) ingested ``events`` events from ``first_ts`` to ``last_ts`` in log order;
    ``count_le[t]``: how many have ``ts <= t``, for every ``t`` of :func:`cursor_times`.

    A cursor feeding windows passes every event its bound allows at each event, so it ends
    where the last event's bound puts it. A calendar head feeds none and moves at most
    ``K = IDLE_STEP_MAX`` per event: ``p_i = min(p_(i-1) + K, c_i)``, ``c_i`` the events
    before event ``i``'s bucket's bound, so ``p = min(K·n, min_j c_j + K·(n-1-j))``. The
    bound of every event of bucket ``b`` is ``C_b`` (bucket start minus the window, minus
    one: always before the event), and the minimum over the bucket is at its last event."""
    out: dict[tuple, int] = {}
    for spec in specs:
        kind = spec[0]
        if events == 0:
            out[spec] = 0
        elif kind == "all":
            out[spec] = events
        elif kind == "prev":
            out[spec] = events - 1
        elif kind == "le":
            out[spec] = min(count_le[last_ts - spec[1]], events)
        elif kind == "hop":
            starts = _bucket_bounds(spec, first_ts, last_ts)
            k = IDLE_STEP_MAX
            best = k * events
            for b in range(len(starts) - 1):
                begin, end = count_le[int(starts[b]) - 1], count_le[int(starts[b + 1]) - 1]
                if end > begin:  # the bucket holds events
                    best = min(best, count_le[int(starts[b]) - spec[3] - 1] + k * (events - end))
            out[spec] = best
        else:
            raise InvariantViolation(f"unknown cursor {spec}")
    return out


def assemble(directory: str | Path, stream: str, states: Iterable[bytes],
             count_le: Mapping[int, int], first_ts: int | None, last_ts: int | None) -> str:
    """Finish an engine directory :func:`prepare` started and whose reservoir holds the whole
    stream: merge the partial ``states`` (disjoint keys), place the cursors (see
    :func:`cursor_positions`) and close it clean. Returns the engine's digest."""
    engine = Engine(directory, fsync=False)
    try:
        sp = engine._plan.streams[stream]
        events = sp.res.next_pos
        if sp.res.first_pos() != 0 or sp.res.last_ts != last_ts:
            raise InvariantViolation("the reservoir does not hold the stream from position 0")
        for data in states:
            sp.core.load(data, True)
        if events:
            for spec, pos in cursor_positions(list(sp.cursors), events, first_ts, last_ts,
                                              count_le).items():
                sp.cursors[spec].seek(pos)
        digest = engine.digest()
    finally:
        engine.close()
    return digest
