"""The keys of the hot tables changed since the previous capture: what a delta checkpoint dumps.

The row buffer's flusher adds, as it writes each generation to DuckDB, the key of every row the
generation upserts or deletes: a run id for a run's rows (``runs``, ``steps``, ``app_tasks``,
``decisions``: a run's rows are dumped and restored together), an event id for ``events_seen``
and an effect id for ``outbox`` (off the apply thread; a generation holds each run once
however often its entries changed it). A capture cuts the set (``RowBuffer.cut_changes``) in a
work the flusher runs right after the one opening its view (``when_landed``), so the set holds
exactly the rows that view holds changed since the capture before. The small tables written by
the other entries (workflows, metric definitions) are not tracked: a delta dumps them whole.

``since`` is the offset the set is relative to: the previous capture, or the offset a restore
brought the state to; None when unknown (a fresh state, or the set grew past ``KEYS_MAX``
because nothing captured: then the next checkpoint is a full one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Beyond this many keys (a node that never checkpoints) the set is dropped: it would only
# grow, and a full checkpoint is as cheap as a delta of most of the state.
KEYS_MAX = 2_000_000

# Each hot table's key column in a delta, and the family of keys that names its rows.
TABLE_KEYS: dict[str, str] = {
    "runs": "run_id", "steps": "run_id", "app_tasks": "run_id", "decisions": "run_id",
    "events_seen": "event_id", "outbox": "effect_id",
}


@dataclass
class Changes:
    since: int | None
    keys: dict[str, set[str]] = field(
        default_factory=lambda: {k: set() for k in set(TABLE_KEYS.values())})

    def size(self) -> int:
        return sum(len(s) for s in self.keys.values())


def absorb(changes: Changes, stage: Any) -> bool:
    """Add the keys of the rows a generation (or an entry's stage: ``buffer.Stage``) writes;
    False once the set holds more than ``KEYS_MAX`` keys of a kind (drop it then)."""
    runs = changes.keys["run_id"]
    if stage.runs:
        runs.update(stage.runs)
    if stage.steps:
        runs.update(s[0] for s in stage.steps)
    if stage.decisions:
        runs.update(stage.decisions)
    if stage.tasks:
        runs.update(k[0] for k in stage.tasks)
    if stage.stored:
        runs.update(stage.stored)
    if stage.runs_evicted:
        runs.update(r[0] for r in stage.runs_evicted)
    if stage.seen or stage.seen_expired:
        seen = changes.keys["event_id"]
        seen.update(stage.seen)
        seen.update(stage.seen_expired)
    if stage.outbox or stage.outbox_done:
        outbox = changes.keys["effect_id"]
        outbox.update(r[0] for r in stage.outbox)
        outbox.update(stage.outbox_done)
    return len(runs) <= KEYS_MAX and len(changes.keys["event_id"]) <= KEYS_MAX
