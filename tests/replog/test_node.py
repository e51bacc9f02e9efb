"""The threaded node over in-memory and file logs: forwarding, read-your-writes, failover.

The three-node tests run both ways a leader writes: records sent on the submitting thread with
their reports taken by the loop (``inline``, as on Kafka) and an appender thread's group
commits (``thread``, as on the file log)."""

import pathlib

import pytest

from replog import AppendFailed, Fenced, Node, NotLeader, Role
from replog.entry import Entry
from replog.filelog import FileLog
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV
from replog.testing.kv import DuckKV
from replog.testing.memlog import DirectForwarder, ManualElection, MemLog

WAIT_S = 10.0  # generous: only reached when something is broken


def wait_for(predicate, timeout_s=WAIT_S):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def _three_nodes(append_thread: bool):
    log, directory, nodes_by_url = MemLog(), {}, {}
    nodes = []
    for i in range(3):
        url = f"mem://n{i}"
        seen: list[int] = []
        node = Node(
            DictKV(),
            log,
            ManualElection(directory),
            node_id=f"n{i}",
            advertise_url=url,
            forwarder=DirectForwarder(nodes_by_url),
            on_effects=lambda entry, _effects, seen=seen: seen.append(entry.offset),
            append_thread=append_thread,
        )
        node.applied_offsets = seen  # every offset this node applied, in order
        nodes_by_url[url] = node
        nodes.append(node)
        node.start()
    yield log, nodes
    for n in nodes:
        n.stop()


@pytest.fixture(params=["inline", "thread"])
def cluster(request):
    yield from _three_nodes(append_thread=request.param == "thread")


@pytest.fixture
def sending_cluster():
    """Three nodes whose leader sends on the submitting thread (as on Kafka)."""
    yield from _three_nodes(append_thread=False)


def test_leader_acknowledges_after_apply_and_followers_mirror(cluster):
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    applied = a.submit(ops.KIND, ops.put("k", 7), 5).result(WAIT_S)
    assert applied.writer_id == 1 and applied.effects == [{"key": "k", "value": 7}]
    assert a.sm.get("k") == 7 and a.applied_offset >= applied.offset
    for f in (b, c):
        assert f.wait_applied(applied.offset, WAIT_S) and f.sm.get("k") == 7
    assert a.sm.digest() == b.sm.digest() == c.sm.digest()


def test_follower_forwards_and_reads_its_own_write(cluster):
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    applied = b.submit(ops.KIND, ops.incr("n", 5), 5).result(WAIT_S)
    # Resolved on the follower only once the follower itself applied the entry.
    assert b.applied_offset >= applied.offset and b.sm.get("n") == 5


def test_deposed_leader_fails_pending_and_its_late_write_is_fenced(cluster):
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    log.hold(1)  # writer 1 freezes inside its append, like a leader in a GC pause
    pending = a.submit(ops.KIND, ops.put("late", 1), 5)
    assert wait_for(lambda: log.frozen_appends.get(1, 0) > 0)  # the write is inside its append
    b.election.elect(2)
    assert wait_for(lambda: b.is_leader)
    assert wait_for(lambda: a.role is Role.FOLLOWER)  # fenced by writer 2 in the log
    with pytest.raises(Fenced):
        pending.result(WAIT_S)
    before = len(log.records)
    log.release(1)  # the late write lands after the new leader's entries
    assert wait_for(lambda: len(log.records) > before)
    ok = b.submit(ops.KIND, ops.put("after", 2), 5).result(WAIT_S)
    for n in (a, b, c):
        assert n.wait_applied(ok.offset, WAIT_S)
        assert n.sm.get("late") is None and n.sm.get("after") == 2
    assert a.sm.digest() == b.sm.digest() == c.sm.digest()


def test_failed_append_fails_the_request(cluster):
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    log.fail_appends = True
    with pytest.raises(AppendFailed):
        a.submit(ops.KIND, ops.put("x", 1), 5).result(WAIT_S)
    log.fail_appends = False
    assert a.submit(ops.KIND, ops.put("x", 2), 5).result(WAIT_S).effects[0]["value"] == 2


class _Sink:
    """A ``Sink`` that is not a Future: what a caller of ``submit_to`` hands the node."""

    def __init__(self) -> None:
        import threading

        self.done = threading.Event()
        self.outcomes: list = []

    def set_result(self, result) -> None:
        self.outcomes.append(("result", result))
        self.done.set()

    def set_exception(self, exception) -> None:
        self.outcomes.append(("error", exception))
        self.done.set()


def test_submit_to_settles_a_sink_once_on_the_leader_the_follower_and_with_no_leader(cluster):
    log, (a, b, c) = cluster
    lost = _Sink()
    b.submit_to(ops.KIND, ops.put("k", 1), 1, lost)  # no leader yet: fails at once
    assert lost.done.is_set() and lost.outcomes[0][0] == "error"
    assert isinstance(lost.outcomes[0][1], NotLeader)
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    led, forwarded = _Sink(), _Sink()
    a.submit_to(ops.KIND, ops.put("k", 2), 5, led)
    b.submit_to(ops.KIND, ops.incr("n", 3), 5, forwarded)  # relayed from a forwarding Future
    assert led.done.wait(WAIT_S) and forwarded.done.wait(WAIT_S)
    (kind, applied), = led.outcomes
    assert kind == "result" and applied.writer_id == 1 and a.sm.get("k") == 2
    (kind, applied), = forwarded.outcomes
    assert kind == "result" and b.applied_offset >= applied.offset and b.sm.get("n") == 3


def test_explicit_deposition_fails_pending_with_not_leader(cluster):
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    log.hold(1)
    pending = a.submit(ops.KIND, ops.put("y", 1), 5)
    a.election.depose("session lost")
    with pytest.raises(NotLeader):
        pending.result(WAIT_S)
    log.release(1)


def test_submit_on_follower_without_leader_fails_fast(cluster):
    log, (a, b, c) = cluster
    with pytest.raises(NotLeader):
        b.submit(ops.KIND, ops.put("k", 1), 1).result(WAIT_S)


def test_embedded_node_on_a_file_log_survives_a_restart(tmp_path: pathlib.Path):
    path = tmp_path / "log"
    node = Node(DuckKV(), FileLog(path), SingleNodeElection(), node_id="e", advertise_url="x")
    node.start()
    assert wait_for(lambda: node.is_leader)
    futures = [node.submit(ops.KIND, ops.incr(f"c{i % 4}"), 5) for i in range(40)]
    last = max(f.result(WAIT_S).offset for f in futures)
    digest = node.sm.digest()
    node.stop()
    again = Node(DuckKV(), FileLog(path), SingleNodeElection(), node_id="e", advertise_url="x")
    again.start()
    assert again.wait_applied(last, WAIT_S)
    assert again.sm.digest() == digest and again.sm.get("c0") == 10
    again.stop()


def test_file_log_cuts_a_torn_tail(tmp_path: pathlib.Path):
    path = tmp_path / "log"
    log = FileLog(path, fsync=False)
    log.append([b"one", b"two"])
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x10garbage")
    log = FileLog(path, fsync=False)
    assert log.end_offset == 2
    log.append([b"three"])
    assert [r for _, r in log.open_reader(0).poll(0.1, 10)] == [b"one", b"two", b"three"]


def test_checkpointer_hook_is_called_after_apply(tmp_path: pathlib.Path):
    calls = []

    class Recorder:
        def maybe_checkpoint(self, offset, writer_id, writer_seq):
            calls.append((offset, writer_id))

    node = Node(
        DictKV(),
        MemLog(),
        SingleNodeElection(writer_id=3),
        node_id="e",
        advertise_url="x",
        checkpointer=Recorder(),
    )
    node.start()
    applied = node.submit(ops.KIND, ops.put("k", 1), 5).result(WAIT_S)
    node.stop()
    assert (applied.offset, 3) in calls and calls == sorted(calls)


def test_snapshot_view_is_consistent_while_apply_continues(tmp_path: pathlib.Path):
    sm = DuckKV()
    for i in range(100):
        sm.apply(Entry(i, 1, 0, ops.KIND, ops.put(f"k{i}", i), i))
    writer, digest = sm.snapshot(), sm.digest()
    for i in range(100, 150):
        sm.apply(Entry(i, 1, 0, ops.KIND, ops.put(f"k{i}", i), i))
    writer.write(tmp_path)
    restored = DuckKV()
    restored.restore(tmp_path)
    assert restored.digest() == digest and restored.applied_offset == 99


class _Probe(DictKV):
    """Records what the node publishes as applied while each entry is being applied."""

    def __init__(self, fail_key: str | None = None) -> None:
        super().__init__()
        self.node: Node | None = None
        self.seen_while_applying: list[tuple[int, int]] = []
        self.fail_key = fail_key

    def apply(self, entry: Entry):
        assert self.node is not None
        self.seen_while_applying.append((entry.offset, self.node.applied_offset))
        if self.fail_key is not None and entry.kind == ops.KIND and \
                ops.decode(entry.payload)["key"] == self.fail_key:
            raise OSError("disk gone")  # a local failure: the node must stop
        return super().apply(entry)


def test_applied_offset_is_published_only_after_the_entry_is_applied(tmp_path: pathlib.Path):
    probe = _Probe(fail_key="boom")
    node = Node(probe, FileLog(tmp_path / "log"), SingleNodeElection(1), node_id="n",
                advertise_url="file://n")
    probe.node = node
    node.start()
    try:
        assert wait_for(lambda: node.is_leader)
        for i in range(5):
            applied = node.submit(ops.KIND, ops.put(f"k{i}", i), 5).result(WAIT_S)
            assert node.applied_offset >= applied.offset
        assert probe.seen_while_applying
        assert all(published < offset for offset, published in probe.seen_while_applying)
        before = node.applied_offset
        failed = node.submit(ops.KIND, ops.put("boom", 1), 5)
        with pytest.raises(Exception):  # noqa: B017 - the node stops; the request fails
            failed.result(WAIT_S)
        assert wait_for(lambda: node.failure is not None)
        assert node.applied_offset == before  # the entry that failed is not published
    finally:
        node.stop()


def test_file_log_keeps_a_sparse_index_and_readers_start_anywhere(tmp_path, monkeypatch):
    from replog import filelog

    monkeypatch.setattr(filelog, "index_every_records", 3)
    log = FileLog(tmp_path / "log", fsync=False)
    log.append([f"r{i}".encode() for i in range(10)])
    assert log.end_offset == 10 and len(log._index) == 4  # not one position per record
    for start in (0, 2, 3, 7, 9, 10):
        reader = log.open_reader(start)
        got = reader.poll(0.0, 100)
        assert got == [(i, f"r{i}".encode()) for i in range(start, 10)]
        reader.close()
    log.append([b"more"])
    log.close()
    again = FileLog(tmp_path / "log", fsync=False)  # the index is rebuilt the same way
    reader = again.open_reader(5)
    assert [o for o, _ in reader.poll(0.0, 3)] == [5, 6, 7]
    assert [o for o, _ in reader.poll(0.0, 100)] == [8, 9, 10]
    reader.close()
    again.close()


@pytest.fixture
def lone_leader():
    node = Node(DictKV(), MemLog(), ManualElection({}), node_id="n0", advertise_url="mem://n0")
    node.start()
    node.election.elect(1)
    assert wait_for(lambda: node.is_leader)
    yield node
    node.stop()


@pytest.fixture
def short_stall(monkeypatch):
    import replog.node as node_mod

    monkeypatch.setattr(node_mod, "reader_stall_s", 0.2)


def _make_stuck(node: Node) -> None:
    import time

    import replog.node as node_mod

    node._reader.poll = lambda timeout_s, records_max: []  # stuck for good
    time.sleep(node_mod.follower_poll_timeout_s + 0.05)  # a poll under way has returned


def _raw(writer_id: int, seq: int) -> bytes:
    return Entry(-1, writer_id, 1, ops.KIND, ops.put(f"w{writer_id}s{seq}", seq), seq).encode()


def test_a_log_read_failure_is_retried_and_shown_not_fatal(cluster):
    """A broker restarting makes reads fail for a while: the loop retries them, /healthz's
    problems name the failure meanwhile, and the node applies again once reads work."""
    log, (leader, node, _) = cluster
    reader = node._reader
    real_poll, failures = reader.poll, [RuntimeError("broker down")] * 6

    def flaky_poll(timeout_s, records_max):
        if failures:
            raise failures.pop()
        return real_poll(timeout_s, records_max)

    reader.poll = flaky_poll
    assert wait_for(lambda: any("broker down" in p for p in node.problems()))
    leader.election.elect(1)
    applied = leader.submit(ops.KIND, ops.put("k", 1), WAIT_S).result(WAIT_S)
    assert node.wait_applied(applied.offset, WAIT_S) and node.sm.get("k") == 1
    assert node.failure is None and node.problems() == []


def test_a_leader_applies_its_own_records_without_reading_them(cluster):
    """The leader's appends come back with their offsets: it applies them from memory, and
    its reader fetches nothing; the followers read the same records and hold the same state."""
    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    futures = [a.submit(ops.KIND, ops.incr(f"c{i % 3}", i), WAIT_S) for i in range(30)]
    last = max(f.result(WAIT_S).offset for f in futures)
    # Its LeaderStarted may have been read by its follower's reader, just before it closed.
    assert a.records_read <= 1 and a.records_own + a.records_read == last + 1
    assert a._reader is None or a._reader.paused
    for f in (b, c):
        assert f.wait_applied(last, WAIT_S) and f.records_own == 0
        assert f.sm.digest() == a.sm.digest()


def test_a_leader_reads_the_gaps_a_stale_writer_left_between_its_records(cluster):
    """Records of a deposed writer land between the leader's own: the leader reads each gap
    from the log (and fences it, as every replica does) and applies its own records from
    memory; an idle leader finds the stale records after its last one by asking where the
    log ends."""
    log, (a, b, c) = cluster
    a.election.elect(5)
    assert wait_for(lambda: a.is_leader)
    offsets = []
    for i in range(5):
        log.append([_raw(3, i)])  # writer 3 was deposed before 5 was elected
        offsets.append(a.submit(ops.KIND, ops.put(f"k{i}", i), WAIT_S).result(WAIT_S).offset)
    assert offsets == [2, 4, 6, 8, 10]
    assert a.records_read >= 5  # each gap (a reader may return the own record after it too)
    log.append([_raw(3, 9)])  # after the leader's last record: nothing makes a gap
    assert wait_for(lambda: a.applied_offset == len(log.records) - 1)  # its idle probe
    for n in (a, b, c):
        assert n.wait_applied(len(log.records) - 1, WAIT_S)
        assert [n.sm.get(f"k{i}") for i in range(5)] == list(range(5))
        assert n.sm.get("w3s0") is None and n.sm.get("w3s9") is None
    assert a.sm.digest() == b.sm.digest() == c.sm.digest()
    assert a.is_leader


def test_a_stuck_reader_is_reopened_where_it_stands(lone_leader, short_stall):
    """The leader must read a gap (a stale writer's record before its own) but its reader
    returns nothing (a Kafka client that lost its broker may not fetch again for minutes):
    the node reopens the reader where it stands and applies."""
    import time

    node = lone_leader
    real_open, opened = node.log.open_reader, []

    def open_stuck_first(start_offset, *, follower=False):
        reader = real_open(start_offset, follower=follower)
        if not opened:
            reader.poll = lambda timeout_s, records_max: time.sleep(timeout_s) or []
        opened.append(reader)
        return reader

    node.log.open_reader = open_stuck_first
    node.log.append([_raw(0, 0)])  # a gap before the leader's next record
    applied = node.submit(ops.KIND, ops.put("k", 2), WAIT_S).result(WAIT_S)
    assert applied.effects == [{"key": "k", "value": 2}] and applied.offset == 2
    assert node.reader_reopens == 1 and node.sm.get("k") == 2 and len(opened) == 2


def test_a_follower_whose_reader_is_stuck_reopens_it_when_the_log_is_ahead(cluster, short_stall):
    """A follower appends nothing, so it cannot tell a stuck reader by its own appends: after a
    while without a record it asks where the log ends, and reopens its reader if it is behind.
    An idle log (nothing to read) reopens nothing."""
    log, (leader, follower, _) = cluster
    leader.election.elect(1)
    assert wait_for(lambda: leader.is_leader)
    leader.submit(ops.KIND, ops.put("a", 1), WAIT_S).result(WAIT_S)
    assert wait_for(lambda: follower.sm.get("a") == 1)
    import time

    time.sleep(0.6)  # idle for longer than the stall: the log is not ahead
    assert follower.reader_reopens == 0
    _make_stuck(follower)
    leader.submit(ops.KIND, ops.put("b", 2), WAIT_S).result(WAIT_S)
    assert wait_for(lambda: follower.sm.get("b") == 2)
    assert follower.reader_reopens == 1


def test_a_node_reads_as_a_follower_until_it_leads_and_again_once_deposed(cluster):
    """A follower's reader may batch its fetches; a leader fetches nothing while it applies
    its own records: the follower's reader is closed when the node is elected and a new one
    opened where it stands once deposed, and nothing is lost or applied twice across."""
    log, (a, b, _) = cluster
    assert a._reader.follower and b._reader.follower
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader and a._reader is None)
    assert b._reader.follower
    x = a.submit(ops.KIND, ops.put("x", 1), WAIT_S).result(WAIT_S)
    # b has applied all a wrote when elected (a follower nobody waits on lingers between
    # polls: elected before it applied x, it would read x across the gap as a leader does)
    assert b.wait_applied(x.offset, WAIT_S)
    a.election.depose()
    b.election.elect(2)
    assert wait_for(lambda: b.is_leader and b._reader is None and a._reader.follower)
    applied = b.submit(ops.KIND, ops.put("y", 2), WAIT_S).result(WAIT_S)
    assert a.wait_applied(applied.offset, WAIT_S)
    assert a.sm.get("x") == b.sm.get("x") == 1 and a.sm.get("y") == 2
    assert a.sm.digest() == b.sm.digest()
    for n in (a, b):
        assert n.applied_offsets == list(range(applied.offset + 1))  # each once, in order


def test_on_role_is_told_each_change_of_leadership_where_it_happens(cluster):
    """Elected (once its LeaderStarted applied), deposed by the election, and fenced by a
    newer writer in the log without being told (split brain): each change is told once."""
    log, (a, b, _) = cluster
    told: dict[str, list[bool]] = {"a": [], "b": []}
    a.on_role, b.on_role = told["a"].append, told["b"].append
    a.election.elect(1)
    assert wait_for(lambda: told["a"] == [True]) and a.is_leader
    a.election.depose()
    assert told["a"] == [True, False]  # on the election's thread, before it returns
    b.election.elect(2)
    assert wait_for(lambda: told["b"] == [True])
    a.election.elect(3)  # b is not told: it learns from writer 3's LeaderStarted in the log
    assert wait_for(lambda: told["b"] == [True, False] and told["a"] == [True, False, True])
    assert b.role is Role.FOLLOWER and a.is_leader


# -- a leader that sends on the submitting thread (``SendingLog``, as on Kafka) ---------------
def _lead(nodes) -> Node:
    a = nodes[0]
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    return a


def test_a_sending_leader_has_no_appender_and_a_file_log_keeps_one(sending_cluster,
                                                                    tmp_path: pathlib.Path):
    log, nodes = sending_cluster
    a = _lead(nodes)
    assert a._sender is log
    assert [t.name for t in a._threads] == ["replog-loop-n0"]
    embedded = Node(DictKV(), FileLog(tmp_path / "log", fsync=False), SingleNodeElection(),
                    node_id="e", advertise_url="x")
    assert embedded._sender is None
    with pytest.raises(ValueError, match="cannot send"):
        Node(DictKV(), FileLog(tmp_path / "log2", fsync=False), SingleNodeElection(),
             node_id="e", advertise_url="x", append_thread=False)


def test_a_send_the_log_refuses_fails_its_request_at_once_and_the_next_is_served(
        sending_cluster):
    log, nodes = sending_cluster
    a, b, c = nodes
    _lead(nodes)
    log.refuse_sends = True
    sink = _Sink()
    a.submit_to(ops.KIND, ops.put("x", 1), 5, sink)
    assert sink.done.is_set()  # settled on the submitting thread, before submit_to returned
    ((kind, error),) = sink.outcomes
    assert kind == "error" and isinstance(error, AppendFailed) and "queue full" in str(error)
    assert any("queue full" in p for p in a.problems())
    log.refuse_sends = False
    applied = a.submit(ops.KIND, ops.put("x", 2), 5).result(WAIT_S)
    assert applied.offset == 1 and a.sm.get("x") == 2 and a.problems() == []
    for n in (b, c):
        assert n.wait_applied(applied.offset, WAIT_S) and n.sm.get("x") == 2


def test_reports_in_any_order_are_applied_in_offset_order_without_reading(sending_cluster):
    """Ten records in flight at once, their reports served newest first: the leader applies
    them in offset order from what it holds, reading none of them back."""
    log, nodes = sending_cluster
    a, b, c = nodes
    _lead(nodes)
    read_before = a.records_read
    log.hold_reports = True
    log.report_order = lambda reports: reports[::-1]
    futures = [a.submit(ops.KIND, ops.incr("n", i), WAIT_S) for i in range(1, 11)]
    assert wait_for(lambda: len(log.records) == 11)  # all landed, none reported yet
    assert not any(f.done() for f in futures)
    log.release_reports()
    results = [f.result(WAIT_S) for f in futures]
    assert [r.offset for r in results] == list(range(1, 11))  # sent in seq order
    assert [r.effects[0]["value"] for r in results] == [i * (i + 1) // 2 for i in range(1, 11)]
    assert a.records_read == read_before and a.records_own >= 10
    assert a.applied_offsets == list(range(11))
    for n in (b, c):
        assert n.wait_applied(10, WAIT_S) and n.sm.digest() == a.sm.digest()


def test_a_record_reported_failed_that_landed_is_read_across_the_gap(sending_cluster):
    """A record whose report says it failed (a timeout: indeterminate) is in the log all the
    same: the leader's next own record leaves a gap before it, which the leader reads, and
    applies what it finds there as every replica does."""
    log, nodes = sending_cluster
    a, b, c = nodes
    _lead(nodes)
    read_before = a.records_read
    log.lose_reports = True
    with pytest.raises(AppendFailed, match="no acknowledgement"):
        a.submit(ops.KIND, ops.put("lost", 1), WAIT_S).result(WAIT_S)
    log.lose_reports = False
    applied = a.submit(ops.KIND, ops.put("next", 2), WAIT_S).result(WAIT_S)
    assert applied.offset == 2 and a.records_read > read_before
    for n in (a, b, c):
        assert n.wait_applied(2, WAIT_S)
        assert n.sm.get("lost") == 1 and n.sm.get("next") == 2
    assert a.applied_offsets == [0, 1, 2]
    assert a.sm.digest() == b.sm.digest() == c.sm.digest()


def test_requests_queued_while_starting_are_sent_once_leader_started_applied(sending_cluster):
    log, nodes = sending_cluster
    a, b, _ = nodes
    log.hold(1)  # the new leader's LeaderStarted waits in the log's client
    a.election.elect(1)
    assert wait_for(lambda: log.frozen_appends.get(1) == 1)
    futures = [a.submit(ops.KIND, ops.put(f"q{i}", i), WAIT_S) for i in range(3)]
    import time

    time.sleep(0.1)
    assert a.role is Role.STARTING and log.frozen_appends[1] == 1  # only LeaderStarted went
    log.release(1)
    assert [f.result(WAIT_S).offset for f in futures] == [1, 2, 3]
    assert b.wait_applied(3, WAIT_S) and b.sm.digest() == a.sm.digest()


def test_a_refused_leader_started_is_sent_again(sending_cluster):
    import time

    log, nodes = sending_cluster
    a = nodes[0]
    log.refuse_sends = True
    a.election.elect(1)
    time.sleep(0.3)  # several retries, each refused
    assert a.role is Role.STARTING and not log.records and a.problems()
    log.refuse_sends = False
    assert wait_for(lambda: a.is_leader)
    assert a.submit(ops.KIND, ops.put("k", 1), WAIT_S).result(WAIT_S).offset == 1


def test_a_follower_nobody_waits_on_lingers_and_a_waiter_wakes_it(cluster, monkeypatch):
    """Between polls a follower lets records gather (``follower_linger_s``) unless someone
    waits on its applied offset: a read of its own write, or a request forwarded through it,
    is answered without waiting out the linger."""
    import time

    from replog import node as node_module

    log, (a, b, c) = cluster
    a.election.elect(1)
    assert wait_for(lambda: a.is_leader)
    start = a.submit(ops.KIND, ops.put("k", 0), WAIT_S).result(WAIT_S)
    assert b.wait_applied(start.offset, WAIT_S) and c.wait_applied(start.offset, WAIT_S)
    monkeypatch.setattr(node_module, "follower_linger_s", 60.0)  # far beyond every wait here
    first = a.submit(ops.KIND, ops.put("k", 1), WAIT_S).result(WAIT_S)
    assert wait_for(lambda: b.applied_offset >= first.offset)  # then b lingers: nobody waits
    assert wait_for(lambda: c.applied_offset >= first.offset)
    second = a.submit(ops.KIND, ops.put("k", 2), WAIT_S).result(WAIT_S)
    time.sleep(0.3)
    assert b.applied_offset < second.offset  # still lingering
    assert b.wait_applied(second.offset, WAIT_S) and b.sm.get("k") == 2  # woken by the waiter
    assert c.applied_offset < second.offset
    forwarded = c.submit(ops.KIND, ops.put("k", 3), WAIT_S).result(WAIT_S)  # c lingered too
    assert c.applied_offset >= forwarded.offset and c.sm.get("k") == 3
