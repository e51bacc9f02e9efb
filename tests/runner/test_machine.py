"""The state machine: the W3 walk, duplicates, reviews, timeouts, apps, determinism, re-drive."""

from __future__ import annotations

import itertools

import pytest

from replog.entry import Entry
from runner.demo import W1_METRICS, w3_definition
from runner.scoring import demo_score
from runner.state import entries
from runner.state.effects import CallApp, EnqueueReview, Reply, RunChanged, StoreRun
from runner.state.machine import RunnerStateMachine
from runner.state.views import presented
from tests.runner.fakes import BruteForceW1Engine

T0 = 1_700_000_000_000


class Log:
    """Feeds entries with increasing offsets to one or more state machines."""

    def __init__(self, *machines: RunnerStateMachine) -> None:
        self.machines = machines
        self.offsets = itertools.count()
        self.history: list[Entry] = []

    def apply(self, kind: str, payload: dict, ts: int = T0) -> list:
        entry = Entry(next(self.offsets), 1, ts, kind, entries.encode(payload))
        self.history.append(entry)
        self.results = [m.apply(entry) for m in self.machines]
        return self.results[0]


def reply(effects: list) -> Reply:
    return next(e for e in effects if isinstance(e, Reply))


def views(runs: list[dict]) -> list[dict]:
    """Runs as the API answers them (a run's own dict also holds its stored_offset, which a
    confirmation may have changed since)."""
    return [presented(r) for r in runs]


def order(event_id: str, **fields) -> dict:
    data = {"card": "c1", "customer": "u1", "merchant": "m1", "country": "US",
            "channel": "card-present", "device": "d1", "amount": 1_000}
    data.update(fields)
    return {"event_id": event_id, "type": "order", "data": data}


@pytest.fixture
def machine(tmp_path):
    m = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    yield m
    m.close()


def setup_w3(log: Log, scorer: str = "builtin:demo") -> None:
    for text in W1_METRICS:
        assert reply(log.apply(entries.METRIC_DEFINED, {"text": text})).ok
    r = reply(log.apply(entries.WORKFLOW_PUBLISHED,
                        {"workflow_id": "w3_demo", "definition": w3_definition(scorer)}))
    assert r.ok and r.result["version"] == 1, r


def test_low_score_order_is_approved_with_path_and_metrics(machine):
    log = Log(machine)
    setup_w3(log)
    effects = log.apply(entries.EVENT_RECEIVED, order("o-1"))
    (run,) = reply(effects).runs
    assert demo_score(order("o-1")["data"]) <= 60
    assert run["state"] == "decided" and run["decision"] == "approve"
    assert [s["node_id"] for s in run["path"]] == ["event", "score"]
    assert run["metrics"] == {"card_count_5m": 1, "card_sum_5m": 1000, "merchant_avg_5m": 1000.0}
    assert "explanation" not in run  # presentation is built when a reader asks, not in apply
    assert "approve_otherwise" in presented(run)["explanation"][-1]
    stored = [e for e in effects if isinstance(e, StoreRun)]
    assert len(stored) == 1 and stored[0].record["decision"] == "approve"


def test_high_score_blocks_and_foreign_rule_reads_country(machine):
    log = Log(machine)
    setup_w3(log)
    risky = dict(amount=900_000, country="NG", channel="card-not-present", is_fraud=True)
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, order("o-1", **risky))).runs
    assert run["decision"] == "block" and run["node_id"] == "block_high_score"
    assert run["scores"]["payment_abuse"] > 90


def test_card_velocity_blocks_the_fifth_payment_within_five_minutes(machine):
    log = Log(machine)
    setup_w3(log)
    decisions = []
    for i in range(6):
        (run,) = reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}"),
                                 ts=T0 + i * 30_000)).runs
        decisions.append(run["node_id"])
    assert decisions[:5] == ["approve"] * 4 + ["block_velocity"][:0] + ["block_velocity"]
    # six minutes later the window has emptied again
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, order("o-late"), ts=T0 + 11 * 60_000)).runs
    assert run["metrics"]["card_count_5m"] == 1 and run["decision"] == "approve"


def test_duplicate_event_returns_the_same_runs_and_starts_none(machine):
    log = Log(machine)
    setup_w3(log)
    first = reply(log.apply(entries.EVENT_RECEIVED, order("o-1")))
    again = log.apply(entries.EVENT_RECEIVED, order("o-1", amount=5))
    assert views(reply(again).runs) == views(first.runs) and reply(again).result["duplicate"]
    assert not [e for e in again if isinstance(e, StoreRun)]
    machine.flush()
    assert machine.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def review_order(event_id: str) -> dict:
    o = order(event_id, amount=300_000, country="NG", channel="card-present")
    assert 60 < demo_score(o["data"]) <= 80
    return o


def test_review_claim_and_decide_resume_the_run(machine):
    log = Log(machine)
    setup_w3(log)
    effects = log.apply(entries.EVENT_RECEIVED, review_order("o-r"))
    (run,) = reply(effects).runs
    assert run["state"] == "waiting" and run["waiting_for"] == "review"
    assert any(isinstance(e, EnqueueReview) and e.queue == "manual_review" for e in effects)
    claim = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
    assert reply(log.apply(entries.REVIEW_CLAIMED, claim)).ok
    other = reply(log.apply(entries.REVIEW_CLAIMED, dict(claim, user="bob")))
    assert not other.ok and other.result["status"] == 409
    decision = dict(claim, outcome="accept", override=False)
    done = log.apply(entries.REVIEW_DECIDED, decision, ts=T0 + 10)
    changed = next(e for e in done if isinstance(e, RunChanged)).run
    assert changed["decision"] == "approve" and changed["node_id"] == "approve_reviewed"
    assert any(isinstance(e, StoreRun) for e in done)


def test_only_the_claim_holder_decides_a_review_and_apps_cannot(machine):
    log = Log(machine)
    setup_w3(log)
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, review_order("o-c"))).runs
    task = {"run_id": run["run_id"], "node_id": "review"}
    decide = dict(task, user="ann", outcome="accept")
    unclaimed = reply(log.apply(entries.REVIEW_DECIDED, decide))
    assert not unclaimed.ok and unclaimed.result["status"] == 409
    assert reply(log.apply(entries.REVIEW_CLAIMED, dict(task, user="bob"))).ok
    not_holder = reply(log.apply(entries.REVIEW_DECIDED, decide))
    assert not not_holder.ok and "claimed by bob" in not_holder.error
    by_app = reply(log.apply(entries.APP_COMPLETED, dict(task, result={"outcome": "accept"})))
    assert not by_app.ok and by_app.result["status"] == 403 and by_app.field == "node_id"
    odd = reply(log.apply(entries.REVIEW_DECIDED, dict(decide, user="bob", outcome="maybe")))
    assert not odd.ok and odd.field == "outcome"
    machine.flush()
    assert machine.con.execute("SELECT status FROM app_tasks WHERE run_id = ?",
                               [run["run_id"]]).fetchone()[0] == "pending"
    overridden = log.apply(entries.REVIEW_DECIDED, dict(decide, override=True))
    assert next(e for e in overridden if isinstance(e, RunChanged)).run["decision"] == "approve"


def test_tick_times_out_the_review_and_takes_the_default_edge(machine):
    log = Log(machine)
    setup_w3(log)
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, review_order("o-t"))).runs
    deadline = T0 + 24 * 3600 * 1000
    assert reply(log.apply(entries.TICK, {}, ts=deadline - 1)).result["expired"] == 0
    effects = log.apply(entries.TICK, {}, ts=deadline)
    assert reply(effects).result["expired"] == 1
    changed = next(e for e in effects if isinstance(e, RunChanged)).run
    assert changed["node_id"] == "block_reviewed" and changed["path"][-1]["default_taken"]
    log.apply(entries.REVIEW_CLAIMED, {"run_id": run["run_id"], "node_id": "review",
                                       "user": "ann"}, ts=deadline + 1)
    late = reply(log.apply(entries.REVIEW_DECIDED, {"run_id": run["run_id"], "node_id": "review",
                                                    "user": "ann", "outcome": "accept"},
                           ts=deadline + 5))
    assert not late.ok and late.result["status"] == 409 and "expired" in late.error


def test_outside_score_app_is_called_and_its_answer_resumes(machine):
    log = Log(machine)
    setup_w3(log, scorer="demo_score")
    effects = log.apply(entries.EVENT_RECEIVED, order("o-a"))
    (run,) = reply(effects).runs
    call = next(e for e in effects if isinstance(e, CallApp))
    assert run["waiting_for"] == "app" and call.app == "demo_score" and call.timeout_ms == 200
    done = log.apply(entries.APP_COMPLETED, {"run_id": run["run_id"], "node_id": "score",
                                             "result": {"payment_abuse": 95}}, ts=T0 + 50)
    assert next(e for e in done if isinstance(e, RunChanged)).run["decision"] == "block"
    # a second order whose app never answers: the Tick at +200 ms takes the default edge
    (run2,) = reply(log.apply(entries.EVENT_RECEIVED, order("o-b"), ts=T0 + 100)).runs
    timeout = log.apply(entries.TICK, {}, ts=T0 + 300)
    assert next(e for e in timeout if isinstance(e, RunChanged)).run["decision"] == "approve"


def test_rejections_name_the_field_and_leave_state_unchanged(machine):
    log = Log(machine)
    setup_w3(log)
    before = machine.digest()
    bad = reply(log.apply(entries.METRIC_DEFINED, {"text": "nonsense"}))
    assert not bad.ok and bad.field == "text"
    wf = w3_definition()
    wf["root"] = "nowhere"
    bad = reply(log.apply(entries.WORKFLOW_PUBLISHED, {"workflow_id": "x", "definition": wf}))
    assert not bad.ok and bad.field == "definition"
    bad = reply(log.apply(entries.APP_COMPLETED, {"run_id": "r_x", "node_id": "n",
                                                  "result": {}}))
    assert not bad.ok and bad.result["status"] == 404
    assert machine.digest() == before


def test_replicas_agree_and_snapshot_restores_the_same_digest(tmp_path):
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    b = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine())
    log = Log(a, b)
    setup_w3(log)
    for i in range(30):
        o = review_order(f"o-{i}") if i % 7 == 0 else order(f"o-{i}", card=f"c{i % 4}")
        log.apply(entries.EVENT_RECEIVED, o, ts=T0 + i * 1000)
    assert a.digest() == b.digest()
    writer = a.snapshot()
    log_after = Log(a)
    log_after.offsets = itertools.count(a.applied_offset + 1)
    log_after.apply(entries.EVENT_RECEIVED, order("o-after"), ts=T0 + 99_000)  # after capture
    writer.write(tmp_path / "snap")
    assert writer.digest() == b.digest() != a.digest()  # the captured view, not the live state
    writer.close()
    c = RunnerStateMachine(tmp_path / "c", engine=BruteForceW1Engine())
    c.restore(tmp_path / "snap")
    assert c.applied_offset == b.applied_offset
    assert c._rows_total == b._rows_total  # the fake engine is not restored: the rows only
    b.sync()  # the digest reads no DuckDB: b's rows may still be pending
    assert c.con.execute("SELECT count(*) FROM runs").fetchone() == \
        b.con.execute("SELECT count(*) FROM runs").fetchone()
    assert c._active.keys() == b._active.keys()
    for m in (a, b, c):
        m.close()


def test_leader_started_redrives_unconfirmed_runs_only(machine):
    log = Log(machine)
    setup_w3(log)
    for i in range(3):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"))
    redrive = log.apply(entries.LEADER_STARTED, {})
    assert sorted(e.record["event_id"] for e in redrive if isinstance(e, StoreRun)) == \
        ["o-0", "o-1", "o-2"]
    stored = [[e.record["run_id"], e.record["offset"]] for e in redrive
              if isinstance(e, StoreRun) and e.record["event_id"] != "o-2"]
    log.apply(entries.EFFECTS_DONE, {"stored": stored, "outbox": []})
    again = log.apply(entries.LEADER_STARTED, {})
    assert [e.record["event_id"] for e in again if isinstance(e, StoreRun)] == ["o-2"]


def test_snapshot_digest_with_the_real_engine_is_the_captured_state(tmp_path):
    """The checkpointer hashes the writer's captured view in the background; with the real
    metrics engine that digest must equal a replica's digest at the capture offset."""
    a = RunnerStateMachine(tmp_path / "a")
    b = RunnerStateMachine(tmp_path / "b")
    log = Log(a, b)
    setup_w3(log)
    for i in range(20):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 3}"), ts=T0 + i * 1000)
    writer = a.snapshot()
    log_after = Log(a)
    log_after.offsets = itertools.count(a.applied_offset + 1)
    log_after.apply(entries.EVENT_RECEIVED, order("o-after", card="c0"), ts=T0 + 99_000)
    writer.write(tmp_path / "snap")
    assert writer.digest() == b.digest() != a.digest()
    writer.close()
    c = RunnerStateMachine(tmp_path / "c")
    c.restore(tmp_path / "snap")
    assert c.digest() == b.digest()
    for m in (a, b, c):
        m.close()


# --------------------------------------------------------------------- poison entries, atomicity
def engine_positions(m: RunnerStateMachine) -> dict:
    return m.engine.positions()


def test_an_object_as_a_group_key_is_rejected_by_apply_on_every_replica(tmp_path):
    """Issue 15: ``"card": {"x": 1}`` used to raise inside the engine and stop the log."""
    a, b = RunnerStateMachine(tmp_path / "a"), RunnerStateMachine(tmp_path / "b")
    log = Log(a, b)
    setup_w3(log)
    log.apply(entries.EVENT_RECEIVED, order("o-0"))
    before = (a.digest(), b.digest(), engine_positions(a))
    log.apply(entries.EVENT_RECEIVED, order("o-bad", card={"x": 1}))
    bad, bad_b = (reply(r) for r in log.results)
    assert bad == bad_b
    assert not bad.ok and bad.field == "data.card" and bad.result["status"] == 422
    assert (a.digest(), b.digest(), engine_positions(a)) == before  # nothing changed
    assert a.rejections.recent()[0]["field"] == "data.card"
    assert b.rejections.counts[(entries.EVENT_RECEIVED, "invalid")] == 1
    # the same event id sent again with good data is applied, not a duplicate without runs
    retry = reply(log.apply(entries.EVENT_RECEIVED, order("o-bad")))
    assert retry.ok and not retry.result["duplicate"] and retry.runs[0]["decision"] == "approve"
    assert a.digest() == b.digest() != before[0]
    for m in (a, b):
        m.close()


@pytest.mark.parametrize("field", ["card", "merchant", "amount"])
@pytest.mark.parametrize("value", [{"x": 1}, [1, 2], [], {}])
def test_every_field_a_metric_reads_must_be_a_scalar(tmp_path, field, value):
    machine = RunnerStateMachine(tmp_path / "real")  # the real engine checks its inputs
    log = Log(machine)
    setup_w3(log)
    before = machine.digest()
    bad = reply(log.apply(entries.EVENT_RECEIVED, order("o-1", **{field: value})))
    assert not bad.ok and bad.field == f"data.{field}"
    assert machine.digest() == before
    # a field no metric reads may hold anything JSON
    ok = reply(log.apply(entries.EVENT_RECEIVED, order("o-2", notes={"deep": [{"x": [1]}]})))
    assert ok.ok and ok.runs[0]["state"] == "decided"
    machine.close()


class PanicException(BaseException):
    """What PyO3 raises for a panic in native code (a BaseException, not an Exception)."""


@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"),
                                 PanicException("no entry found for key")],
                         ids=["exception", "native-panic"])
def test_an_unexpected_exception_in_apply_rejects_the_entry_and_the_log_goes_on(tmp_path,
                                                                                 monkeypatch,
                                                                                 bug):
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    b = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine())
    log = Log(a, b)
    setup_w3(log)
    before = a.digest()
    from runner.state import inputs

    real_ingest = inputs.ingest

    def buggy(engine, stream, data, ts):  # a bug only some inputs reach, before any change
        if data.get("card") == "boom":
            raise bug
        return real_ingest(engine, stream, data, ts)

    monkeypatch.setattr(inputs, "ingest", buggy)
    bad = reply(log.apply(entries.EVENT_RECEIVED, order("o-boom", card="boom")))
    assert not bad.ok and bad.result["status"] == 422 and type(bug).__name__ in bad.error
    assert a.digest() == b.digest() == before
    for m in (a, b):
        (rec,) = m.rejections.recent()
        assert rec["reason"] == "internal" and rec["kind"] == entries.EVENT_RECEIVED
    good = reply(log.apply(entries.EVENT_RECEIVED, order("o-next")))
    assert good.ok and good.runs[0]["decision"] == "approve"
    assert a.digest() == b.digest()
    for m in (a, b):
        m.close()


def test_a_rejected_non_event_entry_rolls_back_its_rows(machine, monkeypatch):
    log = Log(machine)
    setup_w3(log)
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, review_order("o-r"))).runs
    task = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
    assert reply(log.apply(entries.REVIEW_CLAIMED, task)).ok
    before = machine.digest()
    from runner.state import flows

    def broken(*_args, **_kwargs):
        raise RuntimeError("bug in the walk")

    monkeypatch.setattr(flows, "advance", broken)
    bad = reply(log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept")))
    assert not bad.ok and "bug in the walk" in bad.error
    assert machine.digest() == before  # the task is still pending, no step was added
    monkeypatch.undo()
    done = log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept"))
    assert next(e for e in done if isinstance(e, RunChanged)).run["decision"] == "approve"


# --------------------------------------------------------------------- readers without polling
def test_a_reader_syncs_to_see_a_task_just_opened_and_timers_need_no_query(tmp_path):
    from runner.state import queries

    machine = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    log = Log(machine)
    setup_w3(log)
    assert machine.next_deadline() is None
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, review_order("o-r"))).runs
    assert machine.next_deadline() == T0 + 24 * 3600 * 1000  # kept by apply, not queried
    machine.sync()  # what a reader does instead of polling DuckDB
    cur = machine.reader()
    assert queries.review_task(cur, run["run_id"], "review")["status"] == "pending"
    cur.close()
    writer = machine.snapshot()
    writer.write(tmp_path / "snap")
    writer.close()
    task = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
    log.apply(entries.REVIEW_CLAIMED, task, ts=T0 + 5)
    log.apply(entries.REVIEW_DECIDED, dict(task, outcome="accept"), ts=T0 + 10)
    assert machine.next_deadline() is None
    restored = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine())
    restored.restore(tmp_path / "snap")
    assert restored.next_deadline() == T0 + 24 * 3600 * 1000
    for m in (machine, restored):
        m.close()


# --------------------------------------------------------------------- bounded memory
def test_event_ids_are_deduplicated_within_the_retention_only(tmp_path):
    hour = 3_600_000
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine(), dedup_retention_ms=hour)
    b = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine(), dedup_retention_ms=hour)
    log = Log(a, b)
    setup_w3(log)
    first = reply(log.apply(entries.EVENT_RECEIVED, order("o-1", card="c1"), ts=T0))
    again = reply(log.apply(entries.EVENT_RECEIVED, order("o-1", card="c1"), ts=T0 + hour - 1))
    assert again.result["duplicate"] and views(again.runs) == views(first.runs)  # retained
    for i in range(3):  # later orders push o-1 out of the window
        log.apply(entries.EVENT_RECEIVED, order(f"o-x{i}", card=f"x{i}"), ts=T0 + hour + i)
    assert "o-1" not in a._seen and len(a._seen) == 3
    a.flush()
    assert a.con.execute("SELECT count(*) FROM events_seen").fetchone()[0] == 3
    late = reply(log.apply(entries.EVENT_RECEIVED, order("o-1", card="c9"), ts=T0 + 2 * hour))
    assert late.ok and not late.result["duplicate"]  # past the retention: a new event
    assert a.digest() == b.digest()
    writer = a.snapshot()
    writer.write(tmp_path / "snap")
    writer.close()
    c = RunnerStateMachine(tmp_path / "c", engine=BruteForceW1Engine(), dedup_retention_ms=hour)
    c.restore(tmp_path / "snap")
    assert list(c._seen_order) == list(a._seen_order) and c._seen == a._seen
    for m in (a, b, c):
        m.close()


def test_confirmations_mark_runs_stored_across_flushed_generations(machine):
    """The flush's UPDATE is bounded by the oldest confirmed offset: runs flushed in earlier
    generations are still marked, runs older and newer than the batch are left alone."""
    log = Log(machine)
    setup_w3(log)
    for i in range(6):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"))
        machine._buffer.flush()  # each run's row lands in its own generation
    redrive = {e.record["event_id"]: e.record for e in log.apply(entries.LEADER_STARTED, {})
               if isinstance(e, StoreRun)}
    stored = [[redrive[f"o-{i}"]["run_id"], redrive[f"o-{i}"]["offset"]] for i in (2, 4)]
    log.apply(entries.EFFECTS_DONE, {"stored": stored, "outbox": []})
    again = log.apply(entries.LEADER_STARTED, {})
    assert sorted(e.record["event_id"] for e in again if isinstance(e, StoreRun)) == \
        ["o-0", "o-1", "o-3", "o-5"]
    assert machine.con.execute("SELECT count(*) FROM runs WHERE stored_offset >= offset_"
                               ).fetchone() == (2,)


def test_a_generation_goes_to_duckdb_once_old_enough_in_log_time(machine):
    """Besides its size, a generation's age in log time (entry ts, the same on every replica)
    hands it to the flusher, so DuckDB never lags the applied state by more than that."""
    from runner.state import buffer

    log = Log(machine)
    setup_w3(log)
    log.apply(entries.EVENT_RECEIVED, order("o-0", card="c0"), ts=T0)
    log.apply(entries.EVENT_RECEIVED, order("o-1", card="c1"),
              ts=T0 + buffer.handoff_log_ms_max - 1)
    assert machine._buffer.current.rows() > 0  # still pending: neither large nor old enough
    log.apply(entries.EVENT_RECEIVED, order("o-2", card="c2"), ts=T0 + buffer.handoff_log_ms_max)
    assert machine._buffer.current.rows() == 0  # handed off whole, with o-2's rows
    log.apply(entries.EVENT_RECEIVED, order("o-3", card="c3"), ts=T0 + buffer.handoff_log_ms_max)
    assert machine._buffer.current.rows() > 0  # a new generation starts with o-3
    machine.sync()
    assert machine.con.execute("SELECT count(*) FROM runs").fetchone() == (4,)


def test_an_events_runs_are_inserted_and_a_resumed_run_replaces_its_row(machine):
    """The flush writes an event's runs with a plain INSERT (their ids are new) and a run a
    later entry changed with INSERT OR REPLACE: both end up as one row, the newest."""
    log = Log(machine)
    setup_w3(log)
    log.apply(entries.EVENT_RECEIVED, order("o-1"))
    (run,) = reply(log.apply(entries.EVENT_RECEIVED, review_order("o-r"))).runs
    assert not machine._buffer.current.replaced
    machine.sync()
    claim = {"run_id": run["run_id"], "node_id": "review", "user": "ann"}
    log.apply(entries.REVIEW_CLAIMED, claim)
    log.apply(entries.REVIEW_DECIDED, dict(claim, outcome="accept", override=False), ts=T0 + 10)
    # the resumed run's rows wait in the buffer (no flush of their own), marked as replacing
    assert machine._buffer.current.rows() > 0 and machine._buffer.current.replaced
    machine.sync()
    rows = machine.con.execute("SELECT run_id, state, decision FROM runs ORDER BY event_id"
                               ).fetchall()
    assert [(s, d) for _, s, d in rows] == [("decided", "approve"), ("decided", "approve")]
    assert machine.con.execute("SELECT decision FROM decisions WHERE run_id = ?",
                               [run["run_id"]]).fetchone() == ("approve",)


def test_a_generation_goes_to_duckdb_where_its_phase_puts_the_span_boundary(machine,
                                                                             monkeypatch):
    """A generation is handed off once the log offset enters a new span of
    ``handoff_entries``, shifted by the buffer's phase: replicas with other phases flush at
    other offsets, and a reader's sync in between does not move the next boundary."""
    from runner.state import buffer

    log = Log(machine)
    setup_w3(log)
    monkeypatch.setattr(buffer, "handoff_entries", 4)
    machine._buffer._phase_entries = 1  # boundaries where (offset + 1) % 4 == 0
    handed_at, synced_at = [], None
    for i in range(12):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"))
        if machine._buffer.current.rows() == 0:
            handed_at.append(machine.applied_offset)
        if i == 5:
            machine.sync()  # a reader: hands off mid-span; the span boundaries stay
            synced_at = machine.applied_offset
    by_span = [o for o in handed_at if o != synced_at]
    assert len(by_span) >= 2 and all((o + 1) % 4 == 0 for o in by_span), handed_at
    machine.sync()
    assert machine.con.execute("SELECT count(*) FROM runs").fetchone() == (12,)


def test_replicas_flushing_at_other_phases_hold_the_same_state(tmp_path):
    """Where a generation ends changes when DuckDB gets rows, never what the state is."""
    machines = [RunnerStateMachine(tmp_path / f"m{phase}", flush_phase=phase)
                for phase in (0.0, 0.5, 0.75)]
    try:
        for m in machines:
            log = Log(m)
            setup_w3(log)
            for i in range(40):
                log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 7}"))
        digests = {m.digest() for m in machines}
        tables = {tuple(m.con.execute("SELECT run_id, decision FROM runs ORDER BY run_id")
                        .fetchall()) for m in machines}
        assert len(digests) == 1 and len(tables) == 1
    finally:
        for m in machines:
            m.close()
