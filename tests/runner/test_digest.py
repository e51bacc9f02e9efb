"""The digest apply keeps entry by entry is the digest of the rows DuckDB holds, on replicas
that flush at different times and on one restored from a snapshot; one changed row changes it.
"""

from __future__ import annotations

import shutil

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner.state import digest, entries, snapshot
from runner.state.effects import SendWebhook, StoreRun
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_hot_resume import FlushingLog
from tests.runner.test_machine import T0, order, reply, review_order, setup_w3
from tests.runner.test_one_walk import definition as webhook_definition

MINUTE = 60_000


def node(tmp_path, name: str) -> RunnerStateMachine:
    return RunnerStateMachine(tmp_path / name, engine=BruteForceW1Engine(),
                              dedup_retention_ms=10 * MINUTE, run_retention_ms=10 * MINUTE)


def rows_digest(m: RunnerStateMachine) -> str:
    """The digest computed from every row in DuckDB (a full scan), engine included."""
    m.sync()
    return snapshot.digest(m.con, m.engine)


def history(log: FlushingLog, check) -> None:
    """Every kind of row change: orders (two workflows, webhooks), app answers, reviews,
    ticks, confirmations and sent webhooks, evictions, drafts, publishing, metrics."""
    setup_w3(log, scorer="demo_score")
    check()
    assert reply(log.apply(entries.WORKFLOW_PUBLISHED,
                           {"workflow_id": "wh", "definition": webhook_definition()})).ok
    check()
    stored, hooks, waiting = [], [], []
    for i in range(12):
        body = review_order(f"o-{i}") if i % 3 == 0 else order(f"o-{i}", card=f"c{i % 2}",
                                                               amount=9_000 + i)
        effects = log.apply(entries.EVENT_RECEIVED, body, ts=T0 + i)
        stored += [[e.record["run_id"], e.record["offset"]] for e in effects
                   if isinstance(e, StoreRun)]
        hooks += [e.effect_id for e in effects if isinstance(e, SendWebhook)]
        waiting += [r["run_id"] for r in reply(effects).runs if r["state"] == "waiting"]
        check()
    log.apply(entries.EVENT_RECEIVED, order("o-0"), ts=T0 + 20)  # a duplicate: no change
    check()
    log.apply(entries.EFFECTS_DONE, {"stored": stored[:7], "outbox": hooks[:3]}, ts=T0 + 30)
    check()
    for n, run_id in enumerate(waiting[:6]):
        effects = log.apply(entries.APP_COMPLETED, {"run_id": run_id, "node_id": "score",
                                                    "result": {"payment_abuse": 10 + 30 * n}},
                            ts=T0 + 40)
        stored += [[e.record["run_id"], e.record["offset"]] for e in effects
                   if isinstance(e, StoreRun)]
        check()
    review = {"run_id": waiting[-1], "node_id": "review", "user": "ann"}
    log.apply(entries.REVIEW_CLAIMED, dict(review, ttl_ms=1_000), ts=T0 + 50)
    check()
    log.apply(entries.REVIEW_DECIDED, dict(review, outcome="accept"), ts=T0 + 60)
    check()
    log.apply(entries.TICK, {}, ts=T0 + 5_000)  # the rest time out
    check()
    log.apply(entries.EFFECTS_DONE, {"stored": stored[7:], "outbox": hooks[3:]}, ts=T0 + 6_000)
    check()
    assert reply(log.apply(entries.WORKFLOW_DRAFT_SAVED, {"workflow_id": "wh2",
                                                          "definition": webhook_definition()},
                           ts=T0 + 7_000)).ok
    check()
    log.apply(entries.METRIC_DEFINED, {"text": "metric extra_count_5m = count(payments) "
                                               "by card over 5m"}, ts=T0 + 7_001)
    check()
    # past both retentions: the dedup set forgets, then confirmed decided runs leave
    log.apply(entries.EVENT_RECEIVED, order("o-late", card="c9"), ts=T0 + 30 * MINUTE)
    check()
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 30 * MINUTE + 1)
    check()


def test_the_digest_apply_keeps_is_the_digest_of_the_rows(tmp_path):
    hot, flushed = node(tmp_path, "hot"), node(tmp_path, "flushed")
    log = FlushingLog(hot, flushed, flushing=flushed)
    seen = []

    def check() -> None:
        assert hot.digest() == flushed.digest() == rows_digest(hot) == rows_digest(flushed)
        seen.append(hot.digest())

    history(log, check)
    assert len(set(seen)) > len(seen) // 2  # it moves with the state
    count = hot.con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert 0 < count < 24  # some runs left, the digest followed
    for m in (hot, flushed):
        m.close()


# (table, column): one value of one row changed in the snapshot
CHANGES = [("events_seen", "ts"), ("runs", "stored_offset"), ("runs", "event"),
           ("runs", "decision"), ("steps", "trace"), ("app_tasks", "status"),
           ("decisions", "decision"), ("outbox", "payload"), ("workflow_versions",
                                                              "published_by"),
           ("workflow_drafts", "updated_by"), ("metric_defs", "defined_ts")]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A snapshot of a state holding rows in every table, and its digest."""
    tmp = tmp_path_factory.mktemp("captured")
    a, b = node(tmp, "a"), node(tmp, "b")
    log = FlushingLog(a, b, flushing=b)
    setup_w3(log, scorer="demo_score")
    log.apply(entries.WORKFLOW_PUBLISHED, {"workflow_id": "wh", "definition":
                                           webhook_definition()})
    log.apply(entries.WORKFLOW_DRAFT_SAVED, {"workflow_id": "wh2", "definition":
                                             webhook_definition(), "by": "ann"})
    runs = [reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", amount=9_000 + i),
                            ts=T0 + i)).runs for i in range(4)]
    log.apply(entries.APP_COMPLETED, {"run_id": runs[0][0]["run_id"], "node_id": "score",
                                      "result": {"payment_abuse": 5}}, ts=T0 + 10)
    writer = a.snapshot()
    writer.write(tmp / "snap")
    rows = a._rows_total
    assert writer.digest() == a.digest() == rows_digest(b)
    writer.close()
    for m in (a, b):
        m.close()
    return tmp / "snap", rows


def restored_rows(tmp_path, snap) -> int:
    m = RunnerStateMachine(tmp_path / "restored", engine=BruteForceW1Engine())
    try:
        m.restore(snap)
        assert m._rows_total == digest.scan(m.con).total
        return m._rows_total
    finally:
        m.close()


def test_a_restored_snapshot_has_the_digest_it_was_taken_with(tmp_path, captured):
    snap, rows = captured
    assert restored_rows(tmp_path, snap) == rows


def changed_value(value):
    """A JSON document gains a key, other text a character, a number one more."""
    if value is None:
        return "x"
    if isinstance(value, int):
        return value + 1
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value + "x"
    if isinstance(document, dict):
        return orjson.dumps({**document, "changed": 1}).decode()
    return value + "x"


@pytest.mark.parametrize("table, column", CHANGES)
def test_a_single_changed_row_changes_the_digest(tmp_path, captured, table, column):
    snap, rows = captured
    changed = tmp_path / "snap"
    shutil.copytree(snap, changed)
    part = changed / f"{table}.parquet"
    data = pq.read_table(part)
    values = data.to_pylist()
    assert values, f"no {table} row to change"
    value = values[-1][column]
    values[-1][column] = changed_value(value)
    pq.write_table(pa.Table.from_pylist(values, schema=data.schema), part)
    assert restored_rows(tmp_path, changed) != rows
