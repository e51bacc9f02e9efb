"""App answers, ticks and reviews resume runs from the hot state, without a DuckDB flush.

A replica that never flushes between entries and one that flushes after every entry must
reach the same decisions and the same digest; so must one restored from a snapshot taken
while runs were waiting (its hot state rebuilt from DuckDB).
"""

from __future__ import annotations

from runner.state import entries, queries, schema
from runner.state.effects import RunChanged
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_machine import T0, Log, order, reply, setup_w3

ORDERS = 300
APPROVED = range(0, 100)  # answered with a low score
REVIEWED = range(100, 110)  # answered with a score that sends them to review
# the rest never get an answer: a tick times them out (the score node's default edge)


class CountingConnection:
    """The machine's DuckDB connection, counting the statements apply runs on it."""

    def __init__(self, con) -> None:
        self._con = con
        self.statements: list[str] = []

    def execute(self, sql, *args):
        self.statements.append(sql)
        return self._con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


class FlushingLog(Log):
    """Flushes ``flushing`` after every entry: DuckDB always holds every applied row."""

    def __init__(self, *machines: RunnerStateMachine, flushing: RunnerStateMachine) -> None:
        super().__init__(*machines)
        self.flushing = flushing

    def apply(self, kind: str, payload: dict, ts: int = T0) -> list:
        out = super().apply(kind, payload, ts)
        self.flushing.flush()
        return out


def decisions(m: RunnerStateMachine) -> list[tuple]:
    m.sync()
    return m.con.execute("SELECT r.run_id, r.state, r.node_id, d.decision, r.stored_offset "
                         "FROM runs r LEFT JOIN decisions d USING (run_id) ORDER BY run_id"
                         ).fetchall()


def tables(m: RunnerStateMachine) -> dict[str, list[tuple]]:
    """Every table the digest hashes, as it hashes them."""
    m.sync()
    return {name: m.con.execute(f"SELECT * FROM {name} ORDER BY {order_by}").fetchall()
            for name, (_, order_by) in schema.TABLES.items()}


def test_answers_ticks_and_reviews_resume_runs_without_flushing_pending_orders(tmp_path):
    hot = RunnerStateMachine(tmp_path / "hot", engine=BruteForceW1Engine())
    flushed = RunnerStateMachine(tmp_path / "flushed", engine=BruteForceW1Engine())
    log = FlushingLog(hot, flushed, flushing=flushed)
    setup_w3(log, scorer="demo_score")  # the score node calls an app: every order waits
    runs, offsets = [], []
    for i in range(ORDERS):
        (run,) = reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"),
                                 ts=T0 + i)).runs
        assert run["waiting_for"] == "app"
        runs.append(run["run_id"])
        offsets.append(run["offset"])
    # the run store confirmed the first versions of some: a resumed row keeps that
    log.apply(entries.EFFECTS_DONE, {"stored": [list(s) for s in zip(runs[:50], offsets,
                                                                     strict=False)],
                                     "outbox": []}, ts=T0 + 120)
    writer = flushed.snapshot()  # runs waiting, tasks pending: restored from DuckDB below
    writer.write(tmp_path / "snap")
    writer.close()
    snapshot_offset = flushed.applied_offset

    counting = hot.con = CountingConnection(hot.con)
    pending = hot._buffer.current.rows()
    assert pending >= ORDERS  # nothing reached DuckDB yet: one generation holds every order
    for i in (*APPROVED, *REVIEWED):
        score = 10 if i in APPROVED else 70
        done = log.apply(entries.APP_COMPLETED, {"run_id": runs[i], "node_id": "score",
                                                 "result": {"payment_abuse": score}},
                         ts=T0 + 150)
        changed = next(e for e in done if isinstance(e, RunChanged)).run
        assert changed["decision"] == ("approve" if i in APPROVED else None)
        # the orders' rows are still pending in the same generation: no flush before the answer
        assert hot._buffer.current.rows() >= pending
        pending = hot._buffer.current.rows()
    ticked = reply(log.apply(entries.TICK, {}, ts=T0 + 1_000))
    assert ticked.result["expired"] == ORDERS - len(APPROVED) - len(REVIEWED)
    reviewed = [runs[i] for i in REVIEWED]
    for n, run_id in enumerate(reviewed):
        task = {"run_id": run_id, "node_id": "review", "user": "ann"}
        assert reply(log.apply(entries.REVIEW_CLAIMED, dict(task, ttl_ms=60_000),
                               ts=T0 + 2_000)).ok
        if n % 3 == 0:  # given back, then taken by someone else
            assert reply(log.apply(entries.REVIEW_CLAIMED, dict(task, release=True),
                                   ts=T0 + 2_001)).ok
            task["user"] = "bob"
            assert reply(log.apply(entries.REVIEW_CLAIMED, task, ts=T0 + 2_002)).ok
        if n % 4 == 1:
            taken = reply(log.apply(entries.REVIEW_CLAIMED, dict(task, user="eve"),
                                    ts=T0 + 2_003))
            assert not taken.ok and taken.result["status"] == 409
        if n % 2 == 0:
            log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept"), ts=T0 + 3_000)
    assert hot._buffer.current.rows() >= pending
    assert counting.statements == []  # no DuckDB statement in any of those entries

    # a late answer (its task expired) and a second decision: answered from DuckDB, ignored
    late = reply(log.apply(entries.APP_COMPLETED, {"run_id": runs[-1], "node_id": "score",
                                                   "result": {"payment_abuse": 5}},
                           ts=T0 + 4_000))
    assert late.ok and late.result["ignored"] == "expired"
    again = reply(log.apply(entries.REVIEW_DECIDED,
                            {"run_id": reviewed[0], "node_id": "review", "user": "bob",
                             "outcome": "accept"}, ts=T0 + 4_001))
    assert not again.ok and again.result["status"] == 409
    hot.con = counting._con

    expected = decisions(flushed)
    assert decisions(hot) == expected
    assert sum(1 for _, _, node, _, _ in expected if node == "approve_reviewed") == 5
    assert sum(1 for _, state, _, _, _ in expected if state == "waiting") == 5  # not decided
    assert hot.digest() == flushed.digest()
    assert tables(hot) == tables(flushed)

    # a replica restored while runs waited resumes them from the hot state it rebuilt
    restored = RunnerStateMachine(tmp_path / "restored", engine=BruteForceW1Engine())
    restored.restore(tmp_path / "snap")
    assert restored.applied_offset == snapshot_offset
    for entry in log.history:
        if entry.offset > snapshot_offset:
            restored.apply(entry)
    assert decisions(restored) == expected
    assert tables(restored) == tables(flushed)  # the digest but the fake engine's state
    for m in (hot, flushed, restored):
        m.close()


def test_a_rejected_answer_leaves_the_hot_state_unchanged(tmp_path):
    """A review decision rejected by apply (bad outcome) changes neither the task nor the run
    held in memory: the next, valid decision resumes the run as if it never came."""
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    b = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine())
    log = Log(a, b)
    setup_w3(log, scorer="demo_score")
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, order("o-1"))).runs
    log.apply(entries.APP_COMPLETED, {"run_id": run["run_id"], "node_id": "score",
                                      "result": {"payment_abuse": 70}}, ts=T0 + 10)
    task = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
    before = a.digest()
    bad = reply(log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept")))
    assert not bad.ok and bad.result["status"] == 409  # not claimed
    assert reply(log.apply(entries.REVIEW_CLAIMED, task, ts=T0 + 20)).ok
    bad = reply(log.apply(entries.REVIEW_DECIDED, dict(task, outcome="maybe"), ts=T0 + 30))
    assert not bad.ok and bad.field == "outcome"
    assert a._tasks[(run["run_id"], "review")][4] == "pending"
    assert a.digest() != before  # the claim only
    a.sync()
    held = a.peek_task(run["run_id"], "review")
    assert held == queries.review_task(a.reader(), run["run_id"], "review")
    assert held["status"] == "pending" and held["claimed_by"] == "ann"
    done = log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept"), ts=T0 + 40)
    assert next(e for e in done if isinstance(e, RunChanged)).run["decision"] == "approve"
    assert not a._live and not a._tasks and a.peek_task(run["run_id"], "review") is None
    assert a.digest() == b.digest()
    for m in (a, b):
        m.close()


def test_tick_expires_due_tasks_in_deadline_order_and_at_most_its_limit(tmp_path, monkeypatch):
    from runner.state import machine as machine_module

    monkeypatch.setattr(machine_module, "expired_per_tick_max", 3)
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    log = Log(a)
    setup_w3(log, scorer="demo_score")
    runs = []
    for i in (5, 1, 4, 2, 3):  # the app's timeout is 200 ms: deadlines T0 + 200 + i
        (run,) = reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"),
                                 ts=T0 + i)).runs
        runs.append((i, run["run_id"]))
    first = log.apply(entries.TICK, {}, ts=T0 + 204)
    timed_out = [e.run["event_id"] for e in first if isinstance(e, RunChanged)]
    assert timed_out == ["o-1", "o-2", "o-3"] and reply(first).result["expired"] == 3
    second = log.apply(entries.TICK, {}, ts=T0 + 204)
    assert [e.run["event_id"] for e in second if isinstance(e, RunChanged)] == ["o-4"]
    assert a.next_deadline() == T0 + 205
    a.close()


def test_an_answer_to_a_closed_or_unknown_task_never_flushes(tmp_path):
    """An app answer naming a task apply does not hold (a run decided before its app node, an
    unknown run, a second or late answer, a run that left) is looked up in the pending
    generations, then in DuckDB, never by a flush (any client could stall apply with one per
    request); the answer is the one a replica that flushed after every entry gives."""
    kwargs = {"engine": BruteForceW1Engine(), "dedup_retention_ms": 1_000,
              "run_retention_ms": 1_000}
    hot = RunnerStateMachine(tmp_path / "hot", **kwargs)
    flushed = RunnerStateMachine(tmp_path / "flushed", **{**kwargs,
                                                          "engine": BruteForceW1Engine()})
    log = FlushingLog(hot, flushed, flushing=flushed)
    setup_w3(log, scorer="demo_score")
    runs = []
    for i in range(5):  # one card: the fifth is blocked by velocity before the score node
        (run,) = reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}"), ts=T0 + i)).runs
        runs.append(run)
    assert [r["waiting_for"] for r in runs] == ["app"] * 4 + [None]
    syncs = []

    def no_sync() -> None:
        syncs.append(1)
        raise AssertionError("apply flushed DuckDB")

    real_sync, hot._buffer.sync = hot._buffer.sync, no_sync

    def answer(run_id: str, ts: int, node: str = "score") -> dict:
        log.apply(entries.APP_COMPLETED, {"run_id": run_id, "node_id": node,
                                          "result": {"payment_abuse": 5}}, ts=ts)
        mine, theirs = (reply(effects) for effects in log.results)
        assert mine == theirs
        return mine

    def expect(got, status):
        if isinstance(status, int):
            assert not got.ok and got.result["status"] == status and got.field == "node_id"
        else:
            assert got.ok and got.result["ignored"] == status

    first = answer(runs[0]["run_id"], T0 + 10)
    assert first.ok and first.result["ignored"] is None and first.runs[0]["decision"]
    log.apply(entries.TICK, {}, ts=T0 + 1_000)  # o-1..o-3 expire at the score node
    cases = [(runs[0]["run_id"], "score", "done"),  # a second answer
             (runs[1]["run_id"], "score", "expired"),  # a late one
             (runs[4]["run_id"], "score", 404),  # decided before its app node
             (runs[2]["run_id"], "approve", 404),  # a node that is no task
             ("r_00000000000000000000", "score", 404)]  # no such run
    for run_id, node, status in cases:  # the rows are in the pending generation
        expect(answer(run_id, T0 + 1_100, node), status)
    hot._buffer.sync = real_sync
    hot.sync()
    hot._buffer.sync = no_sync
    for run_id, node, status in cases:  # ... and now only in DuckDB
        expect(answer(run_id, T0 + 1_200, node), status)
    # o-0 leaves once stored and past both retentions: an answer then finds no task at all
    reply(log.apply(entries.EVENT_RECEIVED, order("o-later", card="c9"), ts=T0 + 5_000))
    log.apply(entries.EFFECTS_DONE, {"stored": [[r["run_id"], r["offset"]] for r in runs[:1]],
                                     "outbox": []}, ts=T0 + 5_000)
    log.apply(entries.EFFECTS_DONE, {"stored": [[runs[0]["run_id"], first.runs[0]["offset"]]],
                                     "outbox": []}, ts=T0 + 5_001)
    assert any(runs[0]["run_id"] in g.evicted_ids
               for g in (hot._buffer.current, *hot._buffer._in_flight))
    expect(answer(runs[0]["run_id"], T0 + 5_002), 404)
    assert syncs == []
    hot._buffer.sync = real_sync
    assert hot.digest() == flushed.digest()
    assert tables(hot) == tables(flushed)
    for m in (hot, flushed):
        m.close()
