"""The soak's checker: decides from the recorded history alone whether the cluster kept its
promises (Jepsen style). Pure: no cluster, no clock; ``bench/soak.py`` gathers the inputs.

Inputs:
- ``history``: the operations in the order they happened, as dicts with ``type``:
  ``invoke`` ``{id}`` (an order sent), ``ok`` ``{id, offset, duplicate, runs: [{run_id,
  decision}]}`` (acknowledged), ``fail`` ``{id, error}`` (refused: not applied) or ``info``
  ``{id, error}`` (indeterminate), ``digest`` ``{node, offset, digest}`` (a node's state digest
  at a checkpoint offset), ``fault`` ``{kind, target, t, end_t}``;
- ``log``: the replicated log as read back from Kafka, as ``LogRecord`` (offset, writer id,
  seq, kind, and the event id of ``EventReceived`` entries);
- ``stored``: the run ids the run store (HBase) holds with a decision.

The fence rule (an entry counts only if its (writer_id, seq) is above every earlier one) is
re-implemented here on purpose, so the checker does not trust the code it checks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

problems_per_check_max = 20  # a broken run reports this many per check, not thousands
EVENT_RECEIVED = "EventReceived"


@dataclass(frozen=True)
class LogRecord:
    offset: int
    writer_id: int
    seq: int
    kind: str
    event_id: str | None = None


@dataclass
class Verdict:
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    duplicate_runs: list[str] = field(default_factory=list)
    fenced_applied: list[str] = field(default_factory=list)
    digest_mismatches: list[str] = field(default_factory=list)
    digest_offsets_compared: int = 0
    missing_in_store: list[str] = field(default_factory=list)
    decided_runs: int = 0

    @property
    def valid(self) -> bool:
        return not (self.lost or self.duplicate_runs or self.fenced_applied
                    or self.digest_mismatches or self.missing_in_store)

    def problems(self) -> list[str]:
        return [*self.lost, *self.duplicate_runs, *self.fenced_applied,
                *self.digest_mismatches, *self.missing_in_store]


def fence_verdicts(log: Iterable[LogRecord]) -> dict[int, bool]:
    """offset -> True when the fence accepts the entry there."""
    best = (-1, -1)
    out = {}
    for r in sorted(log, key=lambda r: r.offset):
        key = (r.writer_id, r.seq)
        out[r.offset] = key > best
        if key > best:
            best = key
    return out


def _add(problems: list[str], text: str) -> None:
    if len(problems) < problems_per_check_max:
        problems.append(text)


def check(history: list[dict], log: list[LogRecord], stored: set[str]) -> Verdict:
    v = Verdict()
    by_offset = {r.offset: r for r in log}
    accepted = fence_verdicts(log)
    first_offset: dict[str, int] = {}  # event id -> offset of its first accepted entry
    for r in sorted(log, key=lambda r: r.offset):
        if accepted[r.offset] and r.kind == EVENT_RECEIVED and r.event_id is not None:
            first_offset.setdefault(r.event_id, r.offset)
    new_runs: dict[str, set[int]] = defaultdict(set)  # event id -> offsets acked as new
    run_ids: dict[str, set[frozenset[str]]] = defaultdict(set)
    digests: dict[int, dict[str, str]] = defaultdict(dict)
    for op in history:
        kind = op["type"]
        if kind == "digest":
            digests[int(op["offset"])][str(op["node"])] = str(op["digest"])
            continue
        if kind != "ok":
            continue
        v.acknowledged += 1
        eid, offset = op["id"], int(op["offset"])
        record = by_offset.get(offset)
        if record is None or record.kind != EVENT_RECEIVED or record.event_id != eid:
            _add(v.lost, f"lost: {eid} acknowledged at offset {offset}, which does not hold it")
        elif not accepted[offset]:
            _add(v.fenced_applied, f"fenced: {eid} acknowledged at offset {offset}, an entry "
                 f"of writer {record.writer_id} the fence rejects")
        elif first_offset.get(eid) != offset:
            _add(v.duplicate_runs, f"duplicate: {eid} acknowledged at offset {offset}, but its "
                 f"first entry is at {first_offset.get(eid)}")
        if not op.get("duplicate"):
            new_runs[eid].add(offset)
        runs = op.get("runs") or []
        run_ids[eid].add(frozenset(r["run_id"] for r in runs))
        for run in runs:
            if run.get("decision") is not None:
                v.decided_runs += 1
                if run["run_id"] not in stored:
                    _add(v.missing_in_store, f"store: decided run {run['run_id']} of {eid} is "
                         "not in the run store")
    for eid, offsets in sorted(new_runs.items()):
        if len(offsets) > 1:
            _add(v.duplicate_runs, f"duplicate: {eid} started runs at offsets {sorted(offsets)}")
    for eid, sets in sorted(run_ids.items()):
        if len(sets) > 1:
            _add(v.duplicate_runs, f"duplicate: {eid} answered with different runs {sets}")
    for offset, per_node in sorted(digests.items()):
        if len(per_node) > 1:
            v.digest_offsets_compared += 1
        if len(set(per_node.values())) > 1:
            _add(v.digest_mismatches, f"digests differ at offset {offset}: {per_node}")
    return v
