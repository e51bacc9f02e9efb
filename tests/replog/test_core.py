"""The pure core's protocol: append, wait until applied by me, then acknowledge; a leader's
own acknowledged records applied without reading them back, gaps read from the log."""

import pytest

from replog import Fenced, NotLeader, Overloaded
from replog.core import Limits, ReplicaCore, Role
from replog.entry import KIND_LEADER_STARTED, Entry
from replog.errors import AppendFailed, AppendTimeout


class FakeLog:
    def __init__(self):
        self.records: list[bytes] = []

    def append(self, entries):
        for e in entries:
            self.records.append(e.encode())

    def feed(self, core, sm_effects=lambda e: [e.kind]):
        """Deliver every record the core has not seen; returns completions."""
        out = []
        for offset in range(core.next_offset, len(self.records)):
            step = core.begin(Entry.decode(self.records[offset], offset))
            out += step.completions
            if step.apply:
                out += core.finish(step, sm_effects(step.entry))
        return out


def lead(core, log, writer_id=1, now=0):
    ok, _ = core.elected(writer_id)
    assert ok
    log.append(core.take_batch(now))
    log.feed(core)
    assert core.role is Role.LEADER


def test_leader_serves_only_after_applying_its_leader_started():
    core, log = ReplicaCore(), FakeLog()
    core.elected(1)
    assert core.role is Role.STARTING
    token = core.submit("kv", b"a", now_ms=0, timeout_ms=1000)
    batch = core.take_batch(0)
    assert [e.kind for e in batch] == [KIND_LEADER_STARTED]  # the request waits
    log.append(batch)
    assert core.take_batch(0) == []
    log.feed(core)
    assert core.role is Role.LEADER
    batch = core.take_batch(5)
    assert [(e.kind, e.seq) for e in batch] == [("kv", token)]


def test_acknowledged_only_after_apply_and_group_commit_batches():
    core, log = ReplicaCore(), FakeLog()
    lead(core, log)
    tokens = [core.submit("kv", bytes([i]), 10, 1000) for i in range(5)]
    batch = core.take_batch(10)
    assert len(batch) == 5  # one group commit for all five
    log.append(batch)
    assert core.expire(11) == []  # appended, not applied: nothing completes yet
    completions = log.feed(core)
    assert [c.token for c in completions] == tokens
    assert [c.result.offset for c in completions] == [1, 2, 3, 4, 5]
    assert all(c.result.writer_id == 1 and c.result.effects == ["kv"] for c in completions)


def test_batch_size_is_bounded():
    core, log = ReplicaCore(limits=Limits(batch_entries_max=3)), FakeLog()
    lead(core, log)
    for _ in range(7):
        core.submit("kv", b"x", 0, 1000)
    assert [len(core.take_batch(0)) for _ in range(4)] == [3, 3, 1, 0]


def test_queue_is_bounded():
    core, log = ReplicaCore(limits=Limits(pending_requests_max=2)), FakeLog()
    lead(core, log)
    core.submit("kv", b"x", 0, 1000)
    core.submit("kv", b"x", 0, 1000)
    with pytest.raises(Overloaded):
        core.submit("kv", b"x", 0, 1000)


def test_follower_refuses_and_reserved_kinds_are_refused():
    core = ReplicaCore()
    with pytest.raises(NotLeader):
        core.submit("kv", b"x", 0, 1000)
    core.elected(1)
    with pytest.raises(ValueError):
        core.submit(KIND_LEADER_STARTED, b"x", 0, 1000)


def test_timeout_fails_and_a_timed_out_queued_request_is_never_written():
    core, log = ReplicaCore(), FakeLog()
    lead(core, log)
    t = core.submit("kv", b"late", 0, 100)
    [c] = core.expire(100)
    assert c.token == t and isinstance(c.error, AppendTimeout)
    assert core.take_batch(100) == []


def test_deposed_leader_fails_everything_pending_at_once():
    core, log = ReplicaCore(), FakeLog()
    lead(core, log)
    a = core.submit("kv", b"a", 0, 1000)
    log.append(core.take_batch(0))  # in flight
    b = core.submit("kv", b"b", 0, 1000)  # queued
    completions = core.deposed("session lost")
    assert {c.token for c in completions} == {a, b}
    assert all(isinstance(c.error, NotLeader) for c in completions)
    assert log.feed(core) == []  # its entry is applied, but nobody is acknowledged
    assert core.role is Role.FOLLOWER and core.take_batch(0) == []


def test_newer_writer_in_the_log_fences_the_old_leader_and_its_late_writes():
    old, log = ReplicaCore(), FakeLog()
    lead(old, log, writer_id=1)
    late = old.submit("kv", b"late", 0, 1000)
    late_batch = old.take_batch(0)  # taken before a pause; appended after
    new = ReplicaCore()
    log.feed(new)
    ok, _ = new.elected(2)
    log.append(new.take_batch(0))
    log.append(late_batch)
    completions = log.feed(old)
    assert [(c.token, type(c.error)) for c in completions] == [(late, Fenced)]
    assert old.role is Role.FOLLOWER
    log.feed(new)
    assert new.role is Role.LEADER
    assert new.fence.writer_id == 2 and new.applied_offset == old.applied_offset == 2


def test_election_refused_below_a_writer_already_in_the_log():
    core, log = ReplicaCore(), FakeLog()
    other = ReplicaCore()
    lead(other, log, writer_id=5)
    log.feed(core)
    ok, _ = core.elected(4)
    assert not ok and core.role is Role.FOLLOWER


def test_applied_ts_never_goes_backwards():
    a, log = ReplicaCore(), FakeLog()
    lead(a, log, writer_id=1, now=1000)
    a.submit("kv", b"x", 1000, 1000)
    log.append(a.take_batch(1000))
    b = ReplicaCore()
    log.feed(b)
    b.elected(2)
    log.append(b.take_batch(500))  # a clock behind the last leader's
    seen = []
    c = ReplicaCore()
    for offset in range(len(log.records)):
        step = c.begin(Entry.decode(log.records[offset], offset))
        seen.append(step.entry.ts)
    assert seen == sorted(seen) and seen[-1] == 1000


def test_failed_append_fails_requests_and_requeues_leader_started():
    core = ReplicaCore()
    core.elected(1)
    [ls] = core.take_batch(0)
    assert core.append_failed([ls.seq], "broker down") == []
    [again] = core.take_batch(0)
    assert again.kind == KIND_LEADER_STARTED and again.seq > ls.seq
    log = FakeLog()
    log.append([again])
    log.feed(core)
    t = core.submit("kv", b"x", 0, 1000)
    batch = core.take_batch(0)
    [c] = core.append_failed([e.seq for e in batch], "broker down")
    assert c.token == t and isinstance(c.error, AppendFailed)


def test_redelivered_offsets_are_ignored():
    core, log = ReplicaCore(), FakeLog()
    lead(core, log)
    step = core.begin(Entry.decode(log.records[0], 0))
    assert step.verdict is None and not step.apply


# -- a leader applies its own acknowledged records without reading them back -------------

def _append(log, batch):
    """Append as the log adapter does: the offsets each record took."""
    first = len(log.records)
    log.append(batch)
    return list(range(first, len(log.records)))


def _apply(core, entry, applied):
    step = core.begin(entry)
    out = list(step.completions)
    if step.apply:
        applied.append((step.entry.offset, step.entry.writer_id, step.entry.seq))
        out += core.finish(step, [step.entry.kind])
    return out


def _run(core, log, applied):
    """What the node's loop does as a leader: own records first, the log only where
    ``must_read`` says. Returns (completions, offsets read from the log)."""
    out, read = [], []
    while True:
        own = core.take_own()
        for e in own:
            assert e == Entry.decode(log.records[e.offset], e.offset)  # same bytes, same entry
            out += _apply(core, e, applied)
        if own:
            continue
        if not core.must_read() or core.next_offset >= len(log.records):
            return out, read
        o = core.next_offset
        read.append(o)
        out += _apply(core, Entry.decode(log.records[o], o), applied)


def _lead_own(core, log, writer_id=1):
    core.elected(writer_id)
    batch = core.take_batch(0)
    core.appended(batch, _append(log, batch))
    applied = []
    _run(core, log, applied)
    assert core.role is Role.LEADER
    return applied


def test_a_leader_applies_its_acknowledged_records_without_reading_them():
    core, log = ReplicaCore(), FakeLog()
    applied = _lead_own(core, log)
    tokens = [core.submit("kv", bytearray([i]), 0, 1000) for i in range(3)]
    batch = core.take_batch(0)
    core.appended(batch, _append(log, batch))
    completions, read = _run(core, log, applied)
    assert read == [] and [c.token for c in completions] == tokens
    assert [c.result.offset for c in completions] == [1, 2, 3]
    assert completions[0].result.effects == ["kv"]
    assert applied == [(o, 1, e.seq) for o, e in
                       ((o, Entry.decode(r, o)) for o, r in enumerate(log.records))]


def test_a_stale_writers_records_between_own_records_are_read_and_fenced_alike():
    core, log = ReplicaCore(), FakeLog()
    follower = ReplicaCore()
    applied = _lead_own(core, log, writer_id=5)
    stale = ReplicaCore()
    stale.elected(3)  # a deposed leader that still writes
    for i in range(4):
        t = core.submit("kv", bytes([i]), 0, 1000)
        log.append(stale.take_batch(0) if i == 0 else [Entry(-1, 3, 0, "kv", b"late", 100 + i)])
        batch = core.take_batch(0)
        core.appended(batch, _append(log, batch))
        completions, read = _run(core, log, applied)
        assert read == [len(log.records) - 2]  # exactly the stale record, nothing of its own
        assert [(c.token, c.result is not None) for c in completions] == [(t, True)]
    followed = []
    for o, r in enumerate(log.records):
        _apply(follower, Entry.decode(r, o), followed)
    assert followed == applied and all(w == 5 for _, w, _ in applied)
    assert (follower.fence.writer_id, follower.fence.seq) == (core.fence.writer_id, core.fence.seq)


def test_a_gap_read_past_the_gap_applies_each_offset_once():
    core, log = ReplicaCore(), FakeLog()
    applied = _lead_own(core, log)
    log.append([Entry(-1, 0, 0, "kv", b"stale", 0)])  # a gap at offset 1
    core.submit("kv", b"a", 0, 1000)
    core.submit("kv", b"b", 0, 1000)
    batch = core.take_batch(0)
    core.appended(batch, _append(log, batch))  # offsets 2, 3
    assert core.take_own() == [] and core.must_read()
    # The reader returns the gap and then the leader's own records, and one again.
    completions = []
    for o in (1, 2, 3, 2):
        completions += _apply(core, Entry.decode(log.records[o], o), applied)
    assert [c.result.offset for c in completions] == [2, 3]
    assert core.take_own() == [] and not core.must_read()
    assert [o for o, _, _ in applied] == [0, 2, 3]


def test_an_acknowledged_append_the_leader_loses_leadership_over_is_applied_once():
    core, log = ReplicaCore(), FakeLog()
    applied = _lead_own(core, log)
    t = core.submit("kv", b"x", 0, 1000)
    batch = core.take_batch(0)
    offsets = _append(log, batch)
    [failed] = core.deposed("session lost")  # before the acknowledgement reached the loop
    assert failed.token == t and isinstance(failed.error, NotLeader)
    core.appended(batch, offsets)  # arrives late: a follower keeps nothing
    assert core.take_own() == [] and core.must_read()
    completions = []
    for o in range(core.next_offset, len(log.records)):
        completions += _apply(core, Entry.decode(log.records[o], o), applied)
    assert completions == [] and [o for o, _, _ in applied] == [0, 1]


def test_acknowledged_then_deposed_before_apply_still_applies_in_order_once():
    core, log = ReplicaCore(), FakeLog()
    applied = _lead_own(core, log)
    core.submit("kv", b"x", 0, 1000)
    batch = core.take_batch(0)
    core.appended(batch, _append(log, batch))
    own = core.take_own()  # the loop took them, then the election deposed the node
    core.deposed("session lost")
    completions = []
    for e in own:
        completions += _apply(core, e, applied)
    assert completions == [] and [o for o, _, _ in applied] == [0, 1]
    assert _apply(core, Entry.decode(log.records[1], 1), applied) == []  # redelivered: skipped
    assert [o for o, _, _ in applied] == [0, 1]


def test_an_append_without_offsets_is_read_back_up_to_the_probed_end():
    core, log = ReplicaCore(), FakeLog()
    applied = _lead_own(core, log)
    t = core.submit("kv", b"x", 0, 1000)
    batch = core.take_batch(0)
    _append(log, batch)
    core.appended(batch, None)
    assert core.take_own() == [] and not core.must_read()  # nothing known yet: wait
    core.log_ends_at(len(log.records))
    completions, read = _run(core, log, applied)
    assert read == [1] and [c.token for c in completions] == [t]
    assert not core.must_read()


def test_offsets_already_read_are_not_kept_and_a_restarted_leader_reads_its_past():
    core, log = ReplicaCore(), FakeLog()
    _lead_own(core, log)
    core.submit("kv", b"x", 0, 1000)
    batch = core.take_batch(0)
    offsets = _append(log, batch)
    log.feed(core)  # read from the log before the acknowledgement came
    core.appended(batch, offsets)
    assert core.take_own() == [] and not core.must_read()
    # A restart: the new core starts at 0 and is elected again; its own LeaderStarted lands
    # after what the log holds, which it reads first.
    again = ReplicaCore()
    applied = []
    again.elected(2)
    batch = again.take_batch(0)
    again.appended(batch, _append(log, batch))
    completions, read = _run(again, log, applied)
    assert read == [0, 1] and again.role is Role.LEADER
    assert [o for o, _, _ in applied] == [0, 1, 2]
