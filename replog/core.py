"""The pure core of a replica: roles, fencing, pending requests and group commit.

No I/O, no threads, no clock: the shell (``replog.node.Node`` or the simulator) passes the time
in and performs what the core asks. The protocol on the leader:

1. ``submit`` queues a request and returns a token;
2. the shell calls ``take_batch`` and writes the drafts to the log, in order, and hands the
   offsets the log gave them to ``appended`` (failures to ``append_failed``): either in one
   group commit per batch, or record by record as the log reports each one (Kafka's delivery
   reports, while later batches are already on their way: any grouping of the records of one
   or more batches, each call's in offset order);
3. the shell feeds every record, in offset order, to ``begin``; if the step says apply, it
   calls the state machine and then ``finish``, which completes the token with ``Applied``
   only now, after this node applied the entry itself.

Where a record comes from is the shell's choice, never the verdict's: a leader applies its own
acknowledged records without reading them back (``take_own``, as a Raft leader applies what it
committed) and reads the log only where ``must_read`` says the next offset is not one of them
(another writer's record, an append whose outcome it never learned, or the log's end as last
probed, ``log_ends_at``). An own record holds exactly the fields its bytes decode to, so every
replica judges the same entry at the same offset; ``begin`` skips an offset already processed,
so a record read both ways is applied once. A follower reads everything.

A new leader first appends ``LeaderStarted`` and releases queued requests only once it has
applied it, so it serves from a state that includes every entry before its own.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from replog.entry import KIND_LEADER_STARTED, RESERVED_PREFIX, Entry, leader_started_payload
from replog.errors import (
    AppendFailed,
    AppendTimeout,
    Fenced,
    InvariantViolation,
    NotLeader,
    Overloaded,
    ReplogError,
    require,
)
from replog.fence import Fence, Verdict
from replog.protocols import Applied


class Role(enum.Enum):
    FOLLOWER = "follower"
    STARTING = "starting"  # elected, waiting to apply its own LeaderStarted
    LEADER = "leader"


@dataclass(frozen=True)
class Limits:
    pending_requests_max: int = 10_000
    batch_entries_max: int = 512


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Completion:
    token: int
    result: Applied | None = None
    error: ReplogError | None = None


@dataclass
class Step:
    """What to do with one consumed record."""

    entry: Entry  # with ts clamped so that applied time never goes backwards
    verdict: Verdict | None  # None: an offset already processed (a redelivery)
    completions: list[Completion] = field(default_factory=list)
    # This node was elected but the log shows a newer writer (or fenced its own
    # LeaderStarted): it must leave the election and rejoin with a larger id, or it would hold
    # leadership without ever serving.
    resign: bool = False

    @property
    def apply(self) -> bool:
        return self.verdict is Verdict.ACCEPT


@dataclass
class _Draft:
    seq: int
    kind: str
    payload: bytes
    deadline_ms: int | None  # None: the LeaderStarted entry, which has no caller


class ReplicaCore:
    def __init__(
        self,
        *,
        start_offset: int = 0,
        start_writer_id: int = -1,
        start_writer_seq: int = -1,
        limits: Limits = DEFAULT_LIMITS,
    ):
        self.limits = limits
        self.role = Role.FOLLOWER
        self.my_writer_id: int | None = None
        # Seeded from a checkpoint's (writer_id, seq): a restored replica must skip the same
        # duplicates after the checkpoint as the replicas that applied the whole log.
        self.fence = Fence(start_writer_id, start_writer_seq)
        self.next_offset = start_offset
        self.last_ts = 0  # largest ts applied
        self._stamped_ts = 0  # largest ts this node stamped
        self._next_seq = 0
        self._outbox: deque[int] = deque()
        self._drafts: dict[int, _Draft] = {}  # queued or in flight, by seq
        self._leader_started_seq: int | None = None
        self._deadlines: list[tuple[int, int]] = []  # heap of (deadline_ms, seq)
        self._pending = 0  # drafts that have a caller
        # This leader's records the log acknowledged at offsets >= next_offset, ascending: they
        # are applied from here, not read back.
        self._own: deque[Entry] = deque()
        self._log_end = 0  # where the log ended when last probed (``log_ends_at``)

    # -- state --------------------------------------------------------------------------
    @property
    def applied_offset(self) -> int:
        """The last offset processed (applied or skipped); -1 when none."""
        return self.next_offset - 1

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def pending_count(self) -> int:
        return self._pending

    # -- election -----------------------------------------------------------------------
    def elected(self, writer_id: int) -> tuple[bool, list[Completion]]:
        """Start leading as ``writer_id``. Returns (accepted, completions).

        Refused when the log already holds a larger writer id: this node must rejoin the
        election with a new id.
        """
        if self.role is not Role.FOLLOWER and self.my_writer_id == writer_id:
            return True, []
        if writer_id < self.fence.writer_id:
            return False, self.deposed("a larger writer id is already in the log")
        completions = self._fail_all(NotLeader("leadership changed"))
        self.role = Role.STARTING
        self.my_writer_id = writer_id
        if writer_id == self.fence.writer_id:  # the same id again: continue above its last seq
            self._next_seq = max(self._next_seq, self.fence.seq + 1)
        seq = self._new_seq()
        self._drafts[seq] = _Draft(
            seq, KIND_LEADER_STARTED, leader_started_payload(writer_id), None
        )
        self._outbox.append(seq)
        self._leader_started_seq = seq
        return True, completions

    def deposed(self, reason: str = "deposed") -> list[Completion]:
        """Stop leading at once: every pending request fails, queued drafts are dropped."""
        self.role = Role.FOLLOWER
        self.my_writer_id = None
        self._leader_started_seq = None
        self._own.clear()  # a follower reads every record
        return self._fail_all(NotLeader(reason))

    # -- requests -----------------------------------------------------------------------
    def submit(self, kind: str, payload: bytes, now_ms: int, timeout_ms: int) -> int:
        """Queue a request on the leader; returns its token. Raises NotLeader / Overloaded."""
        if kind.startswith(RESERVED_PREFIX):
            raise ValueError(f"kinds starting with {RESERVED_PREFIX!r} are reserved")
        if self.role is Role.FOLLOWER:
            raise NotLeader()
        if self.pending_count >= self.limits.pending_requests_max:
            raise Overloaded(f"{self.limits.pending_requests_max} requests pending")
        if type(payload) is not bytes:  # an own record applies what its bytes decode to
            payload = bytes(payload)
        seq = self._new_seq()
        deadline = now_ms + timeout_ms
        self._drafts[seq] = _Draft(seq, kind, payload, deadline)
        heapq.heappush(self._deadlines, (deadline, seq))
        self._pending += 1
        self._outbox.append(seq)
        return seq

    def has_batch(self) -> bool:
        if self.role is Role.FOLLOWER or not self._outbox:
            return False
        if self.role is Role.STARTING:
            return self._outbox[0] == self._leader_started_seq
        return True

    def take_batch(self, now_ms: int) -> list[Entry]:
        """The next group of entries to append, stamped with this leader's id and time.

        While starting, only the LeaderStarted entry is released.
        """
        if self.role is Role.FOLLOWER:
            return []
        writer_id = self.my_writer_id
        if writer_id is None:
            raise InvariantViolation("a leader without a writer id")
        ts = max(now_ms, self._stamped_ts, self.last_ts)
        self._stamped_ts = ts
        batch: list[Entry] = []
        while self._outbox and len(batch) < self.limits.batch_entries_max:
            seq = self._outbox[0]
            if self.role is Role.STARTING and seq != self._leader_started_seq:
                break
            self._outbox.popleft()
            draft = self._drafts.get(seq)
            if draft is None:  # timed out while queued: never written
                continue
            batch.append(Entry(-1, writer_id, ts, draft.kind, draft.payload, seq))
        return batch

    def append_failed(self, seqs: list[int], error: str) -> list[Completion]:
        """The log refused these entries. A failed LeaderStarted is queued again."""
        out: list[Completion] = []
        for seq in seqs:
            draft = self._drafts.pop(seq, None)
            if draft is None:
                continue
            if draft.deadline_ms is None:
                if self.role is Role.STARTING and seq == self._leader_started_seq:
                    new_seq = self._new_seq()
                    self._drafts[new_seq] = replace(draft, seq=new_seq)
                    self._outbox.appendleft(new_seq)
                    self._leader_started_seq = new_seq
                continue
            self._pending -= 1
            out.append(Completion(seq, error=AppendFailed(error)))
        return out

    def expire(self, now_ms: int) -> list[Completion]:
        """Fail requests whose deadline passed (they may still be applied later)."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, seq = heapq.heappop(self._deadlines)
            if self._drafts.pop(seq, None) is None:
                continue  # already completed
            self._pending -= 1
            out.append(Completion(seq, error=AppendTimeout("not applied before the deadline")))
        return out

    # -- own records: applied without reading them back ----------------------------------
    def appended(self, entries: Sequence[Entry], offsets: Sequence[int] | None) -> None:
        """The log took ``entries`` (from ``take_batch``) at ``offsets``, one each (None: the
        log could not say where; they are read back). Only a leader keeps them."""
        if offsets is None or self.role is Role.FOLLOWER:
            return
        own = self._own
        for e, offset in zip(entries, offsets, strict=True):
            if offset < self.next_offset:
                continue  # already read from the log
            if own and offset <= own[-1].offset:  # never happens on a log that only grows:
                own.clear()  # trust none of it and read the log instead
                return
            own.append(Entry(offset, e.writer_id, e.ts, e.kind, e.payload, e.seq))

    def take_own(self) -> list[Entry]:
        """This leader's own acknowledged records from ``next_offset`` on, consecutive: feed each
        to ``begin`` (and apply it) as if it had been read from the log."""
        own = self._own
        if not own:
            return []
        nxt = self.next_offset
        while own and own[0].offset < nxt:  # read from the log meanwhile
            own.popleft()
        out = []
        while own and own[0].offset == nxt:
            out.append(own.popleft())
            nxt += 1
        return out

    def must_read(self) -> bool:
        """Whether the record at ``next_offset`` has to be read from the log: always on a
        follower; on a leader when its next own record lies further on (a gap: records this
        node did not append, or whose append it never saw acknowledged) or the log ended past
        ``next_offset`` when last probed."""
        if self.role is Role.FOLLOWER:
            return True
        own, nxt = self._own, self.next_offset
        while own and own[0].offset < nxt:
            own.popleft()
        if own:
            return own[0].offset > nxt
        return nxt < self._log_end

    def has_work(self) -> bool:
        """Whether there is a record to apply now: an own one at ``next_offset``, or one to
        read (``must_read``); a leader's loop waits for the log's acknowledgements otherwise."""
        return self.must_read() or bool(self._own)  # must_read dropped own records behind

    def log_ends_at(self, tail_offset: int) -> None:
        """The log's ``tail_offset`` as probed: a leader reads the records before it that are
        not its own (an idle leader learns so of another writer's records)."""
        self._log_end = max(self._log_end, tail_offset)

    # -- the log ------------------------------------------------------------------------
    def begin(self, entry: Entry) -> Step:
        """Judge one consumed record. Apply it to the state machine iff ``step.apply``."""
        if entry.offset < self.next_offset:
            return Step(entry, None)
        self.next_offset = entry.offset + 1
        verdict = self.fence.admit(entry.writer_id, entry.seq)
        step = Step(entry, verdict)
        if verdict is not Verdict.ACCEPT:
            own_start = (
                self.role is Role.STARTING
                and entry.writer_id == self.my_writer_id
                and entry.seq == self._leader_started_seq
            )
            step.completions = self._drop_own(entry, Fenced(f"entry {verdict.value}"))
            if own_start:  # its own LeaderStarted will never apply: give leadership up
                step.completions += self.deposed(f"own LeaderStarted {verdict.value}")
                step.resign = True
            return step
        if entry.ts < self.last_ts:
            step.entry = replace(entry, ts=self.last_ts)
        self.last_ts = step.entry.ts
        mine = self.my_writer_id
        if self.role is not Role.FOLLOWER and mine is not None and entry.writer_id > mine:
            step.completions = self._fail_all(Fenced(f"writer {entry.writer_id} replaced {mine}"))
            self.role = Role.FOLLOWER
            self.my_writer_id = None
            self._leader_started_seq = None
            self._own.clear()
            step.resign = True
        return step

    def finish(self, step: Step, effects: list[Any]) -> list[Completion]:
        """After the state machine applied ``step.entry``: acknowledge it if it is ours."""
        require(step.apply, "finish called for an entry that was not applied")
        entry = step.entry
        if self.my_writer_id is None or entry.writer_id != self.my_writer_id:
            return []
        if entry.kind == KIND_LEADER_STARTED and entry.seq == self._leader_started_seq:
            self._drafts.pop(entry.seq, None)
            if self.role is Role.STARTING:
                self.role = Role.LEADER
            return []
        draft = self._drafts.pop(entry.seq, None)
        if draft is None:  # timed out or failed before it was applied
            return []
        self._pending -= 1
        return [Completion(entry.seq, result=Applied(entry.offset, entry.writer_id, effects))]

    # -- helpers ------------------------------------------------------------------------
    def _new_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _drop_own(self, entry: Entry, error: ReplogError) -> list[Completion]:
        if self.my_writer_id is None or entry.writer_id != self.my_writer_id:
            return []
        draft = self._drafts.pop(entry.seq, None)
        if draft is None or draft.deadline_ms is None:
            return []
        self._pending -= 1
        return [Completion(entry.seq, error=error)]

    def _fail_all(self, error: ReplogError) -> list[Completion]:
        out = [
            Completion(s, error=error) for s, d in self._drafts.items() if d.deadline_ms is not None
        ]
        self._drafts.clear()
        self._outbox.clear()
        self._deadlines.clear()
        self._pending = 0
        return out
