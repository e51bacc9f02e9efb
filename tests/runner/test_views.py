"""Apply records steps as facts and hands out the run itself; what readers get is built when
they ask. These check that what they get is what DuckDB's rows say (the presentation apply
used to build): the API's view, the run store's record, a forwarded answer, every step's JSON,
on orders decided at once, waiting for an app, a reviewer or a timeout, and passing webhooks;
and on a run restored from a snapshot while it waited (its path then holds dicts too). A run
store record's JSON is written from its steps' own JSON, the same bytes as from their dicts."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from replog.protocols import Applied
from runner.forwarder import decode_applied, encode_applied
from runner.operations import view_of_record
from runner.runstore.base import RunRecord
from runner.state import digest, entries, queries
from runner.state.effects import Reply, RunChanged, StoreRun
from runner.state.machine import RunnerStateMachine
from runner.state.steps import Step, path_dicts
from runner.state.views import presented, presented_encodable, sentence
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_digest import history
from tests.runner.test_hot_resume import FlushingLog
from tests.runner.test_machine import T0, Log, order, reply, setup_w3

# a view's fields that a run store record gives back alike (it holds no waiting_for, and its
# node_id is where the path ends)
RECORDED = ("run_id", "event_id", "workflow_id", "workflow_version", "state", "decision",
            "path", "explanation", "metrics", "scores", "apps", "offset", "started_ts",
            "updated_ts")


class CheckingLog(FlushingLog):
    """Flushes after every entry, then checks every run the entry's effects carry against the
    rows DuckDB now holds."""

    def __init__(self, machine: RunnerStateMachine) -> None:
        super().__init__(machine, flushing=machine)
        self.machine = machine
        self.runs_checked = 0
        self.kinds: set[str] = set()

    def apply(self, kind: str, payload: dict, ts: int = T0) -> list:
        effects = super().apply(kind, payload, ts)
        runs = [r for e in effects if isinstance(e, Reply) for r in e.runs]
        runs += [e.run for e in effects if isinstance(e, RunChanged | StoreRun)]
        for run in runs:
            check_run(self.machine, run)
            self.kinds.add(kind)
        self.runs_checked += len(runs)
        check_forwarded(effects)
        for e in effects:
            if isinstance(e, StoreRun):
                check_record(e)
        return effects


def check_run(m: RunnerStateMachine, run: dict) -> None:
    """The run as apply handed it out, presented, equals the run read back from DuckDB
    presented (when DuckDB holds that version), and its steps' JSON is their dict's."""
    view = presented(run)
    assert "explanation" not in run  # apply built no presentation
    assert view["explanation"] == [sentence(s) for s in view["path"]]
    # the hot path's answer writes the steps' own JSON: byte for byte the view's
    assert orjson.dumps(presented_encodable(run)) == orjson.dumps(view)
    assert presented_encodable(view) is view
    for step in run["path"]:
        if isinstance(step, Step):
            assert step.to_json() == orjson.dumps(step.as_dict())  # byte for byte: the digest
            assert dict(step) == step.as_dict() == step
    cur = m.reader()
    try:
        stored = queries.run(cur, run["run_id"])
    finally:
        cur.close()
    if stored is not None and stored["offset"] == run["offset"]:
        assert presented(stored) == view
        assert orjson.loads(orjson.dumps(view)) == view  # as the API writes it


def check_record(effect: StoreRun) -> None:
    record = RunRecord(**effect.record)
    fast = RunRecord.of_fields(effect.record)  # as the run-store writer builds it
    assert fast == record and fast.to_json() == record.to_json()
    assert list(fast.__dict__) == list(record.__dict__)
    # the recorded steps go to the store as themselves, written as their own JSON: byte for
    # byte the record of their dicts (what the run store held before)
    assert all(a is b for a, b in zip(record.path, effect.run["path"], strict=True))
    assert record.to_json() == orjson.dumps(
        RunRecord(**{**effect.record, "path": path_dicts(effect.run["path"])}))
    again = RunRecord.from_json(record.to_json())
    view = presented(effect.run)
    assert again == record
    assert {k: view_of_record(again)[k] for k in RECORDED} == {k: view[k] for k in RECORDED}


def check_forwarded(effects: list) -> None:
    """A leader's answer forwarded to a follower: the same views as the leader presents."""
    applied = decode_applied(encode_applied(Applied(7, 1, effects)))
    sent = [e for e in effects if isinstance(e, Reply | RunChanged)]
    assert len(applied.effects) == len(sent)
    for mine, theirs in zip(sent, applied.effects, strict=True):
        if isinstance(mine, Reply):
            assert (theirs.ok, theirs.error, theirs.field, theirs.result) == (
                mine.ok, mine.error, mine.field, mine.result)
            assert theirs.runs == [presented(r) for r in mine.runs]
            assert [presented(r) for r in theirs.runs] == theirs.runs
        else:
            assert theirs.run == presented(mine.run)


def test_views_records_and_forwards_equal_what_duckdb_holds(tmp_path):
    m = RunnerStateMachine(tmp_path / "m", engine=BruteForceW1Engine(),
                           dedup_retention_ms=600_000, run_retention_ms=600_000)
    log = CheckingLog(m)
    history(log, lambda: None)  # webhooks, app answers, reviews, ticks, evictions
    assert log.runs_checked > 40
    assert {entries.EVENT_RECEIVED, entries.APP_COMPLETED, entries.REVIEW_DECIDED,
            entries.TICK} <= log.kinds
    m.close()


def test_a_run_restored_while_it_waited_presents_alike(tmp_path):
    a = RunnerStateMachine(tmp_path / "a", engine=BruteForceW1Engine())
    log = CheckingLog(a)
    setup_w3(log, scorer="demo_score")
    (waiting,) = reply(log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0)).runs
    assert waiting["waiting_for"] == "app" and all(isinstance(s, Step) for s in waiting["path"])
    writer = a.snapshot()
    writer.write(tmp_path / "snap")
    writer.close()
    b = RunnerStateMachine(tmp_path / "b", engine=BruteForceW1Engine())
    b.restore(tmp_path / "snap")
    answer = {"run_id": waiting["run_id"], "node_id": "score", "result": {"payment_abuse": 5}}
    decided_a = reply(log.apply(entries.APP_COMPLETED, answer, ts=T0 + 10)).runs[0]
    effects_b = b.apply(log.history[-1])  # the same entry
    decided_b = reply(effects_b).runs[0]
    b.flush()
    check_run(b, decided_b)
    (stored_b,) = [e for e in effects_b if isinstance(e, StoreRun)]
    check_record(stored_b)  # a path of dicts and steps alike
    # the restored run's first step is a dict read from DuckDB, the new ones are facts
    assert not isinstance(decided_b["path"][0], Step) and isinstance(decided_b["path"][-1], Step)
    assert presented(decided_a) == presented(decided_b)
    assert a._rows_total == b._rows_total == digest.scan(b.con).total  # the rows' digest
    for m in (a, b):
        m.close()


def test_a_record_built_from_its_fields_is_the_dataclass_record(tmp_path):
    """``RunRecord.of_fields`` skips the frozen ``__init__`` only for a dict of every field in
    order; a dict missing one, or in another order, still gets the dataclass's defaults and
    the JSON's field order; the record stays frozen."""
    m = RunnerStateMachine(tmp_path / "m", engine=BruteForceW1Engine())
    log = Log(m)
    setup_w3(log)
    (stored,) = [e for e in log.apply(entries.EVENT_RECEIVED, order("o-1"))
                 if isinstance(e, StoreRun)]
    m.close()
    fields = stored.record
    record = RunRecord.of_fields(fields)
    assert record == RunRecord(**fields) and record.to_json() == RunRecord(**fields).to_json()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.state = "decided"  # type: ignore[misc]
    partial = {k: v for k, v in fields.items() if k != "offset"}
    assert RunRecord.of_fields(partial).offset == -1  # the default, as __init__ sets it
    shuffled = dict(reversed(list(fields.items())))
    assert RunRecord.of_fields(shuffled).to_json() == record.to_json()
