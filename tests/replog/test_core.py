"""The pure core's protocol: append, wait until applied by me, then acknowledge."""

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
