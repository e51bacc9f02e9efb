"""Fencing across restarts and failovers: the fence a checkpoint carries, leaders that must give
leadership up, and a log whose start was deleted."""

from __future__ import annotations

import pytest

from replog import LogTruncated, Node, ReplicaCore
from replog.entry import KIND_LEADER_STARTED, Entry, leader_started_payload
from replog.fence import Verdict
from replog.testing import ops
from replog.testing.dictkv import DictKV
from replog.testing.memlog import ManualElection, MemLog

from .test_node import WAIT_S, wait_for


class CountingElection(ManualElection):
    def __init__(self, directory):
        super().__init__(directory)
        self.resigned = 0

    def resign(self) -> None:
        self.resigned += 1


def _raw(writer_id: int, seq: int, kind: str = ops.KIND, payload: bytes | None = None) -> bytes:
    body = payload if payload is not None else ops.put(f"w{writer_id}s{seq}", seq)
    return Entry(-1, writer_id, 1, kind, body, seq).encode()


def test_a_core_restored_with_the_checkpoint_fence_skips_the_same_duplicates():
    # Offsets 0..3 went to every replica; a restored one starts after the checkpoint at 1.
    log = [(0, Entry(0, 5, 1, "k", b"a", 0)), (1, Entry(1, 5, 1, "k", b"b", 1)),
           (2, Entry(2, 5, 1, "k", b"a", 0)),  # a duplicate append of seq 0
           (3, Entry(3, 5, 1, "k", b"c", 2))]
    full = ReplicaCore()
    verdicts_full = [full.begin(e).verdict for _, e in log]
    restored = ReplicaCore(start_offset=2, start_writer_id=5, start_writer_seq=1)
    verdicts_restored = [restored.begin(e).verdict for _, e in log[2:]]
    assert verdicts_full[2:] == verdicts_restored == [Verdict.DUPLICATE, Verdict.ACCEPT]


def test_a_node_restored_mid_writer_applies_what_the_others_applied():
    log = MemLog()
    log.append([_raw(5, 0), _raw(5, 1), _raw(5, 0), _raw(5, 2)])
    full = Node(DictKV(), log, ManualElection({}), node_id="a", advertise_url="a")
    restored = Node(DictKV(), log, ManualElection({}), node_id="b", advertise_url="b",
                    start_offset=2, start_writer_id=5, start_writer_seq=1)
    for n in (full, restored):
        n.start()
    try:
        assert full.wait_applied(3, WAIT_S) and restored.wait_applied(3, WAIT_S)
        assert full.core.fence.seq == restored.core.fence.seq == 2
        assert full.sm.get("w5s2") == restored.sm.get("w5s2") == 2
        assert restored.sm.get("w5s0") is None  # the duplicate at offset 2 was skipped
    finally:
        full.stop(), restored.stop()


def test_a_leader_that_sees_a_newer_writer_in_the_log_resigns():
    log, election = MemLog(), CountingElection({})
    node = Node(DictKV(), log, election, node_id="a", advertise_url="a")
    node.start()
    try:
        election.elect(5)
        assert wait_for(lambda: node.is_leader)
        log.append([_raw(7, 0, KIND_LEADER_STARTED, leader_started_payload(7))])
        assert wait_for(lambda: election.resigned == 1)
        assert not node.is_leader
    finally:
        node.stop()


def test_a_leader_reelected_with_the_fence_id_still_gets_its_leader_started_applied():
    # Restored with fence (5, 10) and elected as 5 again: seqs from 0 would all be duplicates
    # and the node would hold leadership without ever serving.
    log, election = MemLog(), CountingElection({})
    node = Node(DictKV(), log, election, node_id="a", advertise_url="a",
                start_writer_id=5, start_writer_seq=10)
    node.start()
    try:
        election.elect(5)
        assert wait_for(lambda: node.is_leader)
        applied = node.submit(ops.KIND, ops.put("k", 1), WAIT_S).result(WAIT_S)
        assert applied.writer_id == 5 and node.sm.get("k") == 1
    finally:
        node.stop()


def test_a_starting_leader_whose_leader_started_is_fenced_gives_leadership_up():
    core = ReplicaCore()
    assert core.elected(5)[0]
    (started,) = core.take_batch(0)
    core.begin(Entry(0, 9, 1, "k", b"x", 0))  # newer writer: steps down at once
    step = core.begin(Entry(1, started.writer_id, 1, started.kind, started.payload, started.seq))
    assert step.verdict is Verdict.FENCED and not core.is_leader and core.my_writer_id is None


def test_a_fenced_own_leader_started_while_starting_asks_to_resign():
    core = ReplicaCore(start_writer_id=5, start_writer_seq=3)
    core.fence.seq = 3
    assert core.elected(5)[0]
    (started,) = core.take_batch(0)
    core.fence.seq = started.seq + 100  # the same writer's later entries landed first
    step = core.begin(Entry(0, 5, 1, started.kind, started.payload, started.seq))
    assert step.verdict is Verdict.DUPLICATE and step.resign and core.my_writer_id is None


def test_a_log_truncated_past_the_start_offset_is_refused():
    log = MemLog()
    log.append([_raw(1, i) for i in range(10)])
    log.start = 6  # retention deleted 0..5
    node = Node(DictKV(), log, ManualElection({}), node_id="a", advertise_url="a",
                start_offset=4)
    with pytest.raises(LogTruncated, match="starts at offset 6"):
        node.start()
    ok = Node(DictKV(), log, ManualElection({}), node_id="b", advertise_url="b", start_offset=6)
    ok.start()
    try:
        assert ok.wait_applied(9, WAIT_S)
    finally:
        ok.stop()
