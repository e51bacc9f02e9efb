"""Finished runs leave the hot state (DuckDB) after the run retention, alike on every replica,
and readers still find them in the run store."""

from __future__ import annotations

import random
from types import SimpleNamespace

import orjson
import pytest

from replog.protocols import Applied
from runner import explore, operations
from runner.api.errors import render
from runner.errors import NotFound, RunFinished
from runner.runstore.base import RunRecord
from runner.runstore.rocks import RocksRunStore
from runner.service import Service
from runner.state import entries, retention, snapshot
from runner.state.effects import CallApp, StoreRun
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_machine import T0, Log, order, reply, review_order, setup_w3, views

MINUTE = 60_000
HOUR = 60 * MINUTE


def machine(tmp_path, name: str, *, run_ms: int = HOUR, dedup_ms: int = HOUR
            ) -> RunnerStateMachine:
    return RunnerStateMachine(tmp_path / name, engine=BruteForceW1Engine(),
                              dedup_retention_ms=dedup_ms, run_retention_ms=run_ms)


def held(m: RunnerStateMachine, table: str = "runs") -> set[str]:
    """Run ids with rows in ``table`` (after the buffer landed)."""
    m.flush()
    return {r for (r,) in m.con.execute(f"SELECT DISTINCT run_id FROM {table}").fetchall()}


def hold_count(m: RunnerStateMachine) -> dict[str, int]:
    m.flush()
    return {t: m.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "steps", "decisions", "app_tasks")}


def run_of(effects: list) -> dict:
    (run,) = reply(effects).runs
    return run


def stored(effects: list) -> list[list]:
    """What the leader confirms after writing the StoreRun effects of one entry."""
    return [[e.run["run_id"], e.run["offset"]] for e in effects if isinstance(e, StoreRun)]


@pytest.fixture
def pair(tmp_path):
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    yield a, b
    a.close()
    b.close()


def test_stored_finished_runs_leave_duckdb_alike_on_two_replicas(pair):
    a, b = pair
    log = Log(a, b)
    setup_w3(log)
    done, confirm = [], []
    for i in range(5):
        effects = log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"), ts=T0 + i)
        done.append(run_of(effects)["run_id"])
        if i < 3:  # the run store took o-0 .. o-2; o-3 and o-4 are not confirmed yet
            confirm += stored(effects)
    waiting = run_of(log.apply(entries.EVENT_RECEIVED, review_order("o-review"), ts=T0 + 10))
    assert waiting["state"] == "waiting"
    log.apply(entries.EFFECTS_DONE, {"stored": confirm, "outbox": []}, ts=T0 + 20)
    assert held(a) == set(done) | {waiting["run_id"]}  # younger than the retention: all stay
    # Two hours later the dedup window let go of every event id; the next confirmation entry
    # removes the finished, stored runs and nothing else.
    log.apply(entries.EVENT_RECEIVED, order("o-late", card="c-late"), ts=T0 + 2 * HOUR)
    late = run_of(log.results[0])["run_id"]
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR + 1)
    kept = {done[3], done[4], waiting["run_id"], late}
    for m in (a, b):
        assert held(m) == kept
        assert held(m, "steps") == kept
        assert held(m, "decisions") == {done[3], done[4], late}
        assert held(m, "app_tasks") == {waiting["run_id"]}  # its review stays queued
    assert a.digest() == b.digest()
    # The store confirms o-3: the next entry that looks (a Tick here) removes it.
    log.apply(entries.EFFECTS_DONE, {"stored": [[done[3], offset_of(a, done[3])]],
                                     "outbox": []}, ts=T0 + 2 * HOUR + 2)
    assert done[3] not in held(a) and done[4] in held(a)
    log.apply(entries.TICK, {}, ts=T0 + 2 * HOUR + 3)
    assert held(a) == held(b) == {done[4], waiting["run_id"], late}
    assert a.digest() == b.digest()
    assert len(a.finished) == 2 and a.finished.unstored == 2  # o-4 and o-late


def tables_digest(m: RunnerStateMachine) -> str:
    """The digest of the DuckDB tables (the fake engine is not part of snapshots)."""
    m.flush()
    return snapshot.digest(m.con, engine=None)


def offset_of(m: RunnerStateMachine, run_id: str) -> int:
    m.flush()
    return m.con.execute("SELECT offset_ FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]


def test_a_run_stays_while_dedup_holds_its_event_so_a_duplicate_gets_it(tmp_path):
    a = machine(tmp_path, "a", run_ms=MINUTE, dedup_ms=HOUR)
    log = Log(a)
    setup_w3(log)
    first = log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0)
    log.apply(entries.EFFECTS_DONE, {"stored": stored(first), "outbox": []}, ts=T0 + 1)
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 30 * MINUTE)
    assert held(a) == {run_of(first)["run_id"]}  # past the run retention, not the dedup one
    again = reply(log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0 + 40 * MINUTE))
    assert again.result["duplicate"] and views(again.runs) == views(reply(first).runs)
    log.apply(entries.EVENT_RECEIVED, order("o-2", card="c2"), ts=T0 + HOUR)  # o-1 forgotten
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + HOUR + 1)
    assert run_of(first)["run_id"] not in held(a)
    a.close()


def test_removal_is_oldest_first_and_bounded_per_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(retention, "runs_evicted_per_entry_max", 2)
    a, b = machine(tmp_path, "a", run_ms=0), machine(tmp_path, "b", run_ms=0)
    log = Log(a, b)
    setup_w3(log)
    ids = []
    for i in range(5):
        effects = log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"), ts=T0 + i)
        ids.append(run_of(effects)["run_id"])
        log.apply(entries.EFFECTS_DONE, {"stored": stored(effects), "outbox": []}, ts=T0 + i)
    log.apply(entries.EVENT_RECEIVED, order("o-x", card="cx"), ts=T0 + 2 * HOUR)
    for left in ([ids[2], ids[3], ids[4]], [ids[4]], []):
        log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR)
        assert held(a) - {run_of_event(a, "o-x")} == set(left)
        assert a.digest() == b.digest()
    a.close()
    b.close()


def test_unstored_runs_at_the_front_do_not_stop_stored_ones_behind_them(tmp_path, monkeypatch):
    """A run-store outage leaves the oldest decided runs unconfirmed; more runs than one entry
    examines pile up in front. Stored runs decided after them still leave, alike on replicas,
    and the unconfirmed ones leave once the store confirms them."""
    monkeypatch.setattr(retention, "runs_scanned_per_entry_max", 3)
    a, b = machine(tmp_path, "a", run_ms=0), machine(tmp_path, "b", run_ms=0)
    log = Log(a, b)
    setup_w3(log)
    outage, after = [], []
    for i in range(5):  # decided while the store was down: never confirmed
        outage += stored(log.apply(entries.EVENT_RECEIVED, order(f"down-{i}", card=f"d{i}"),
                                   ts=T0 + i))
    for i in range(4):  # decided once it was back: confirmed
        effects = log.apply(entries.EVENT_RECEIVED, order(f"up-{i}", card=f"u{i}"), ts=T0 + 10 + i)
        after += stored(effects)
        log.apply(entries.EFFECTS_DONE, {"stored": stored(effects), "outbox": []},
                  ts=T0 + 10 + i)
    assert a.finished.unstored == b.finished.unstored == 5
    log.apply(entries.EVENT_RECEIVED, order("o-x", card="cx"), ts=T0 + 2 * HOUR)  # dedup forgets
    for m in (a, b):
        assert m.finished.unstored == 6  # o-x too
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR + 1)
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR + 2)
    for m in (a, b):
        assert held(m) == {r for r, _ in outage} | {run_of_event(m, "o-x")}
    assert a.digest() == b.digest()
    log.apply(entries.EFFECTS_DONE, {"stored": outage, "outbox": []}, ts=T0 + 2 * HOUR + 3)
    log.apply(entries.TICK, {}, ts=T0 + 2 * HOUR + 4)
    for m in (a, b):
        assert held(m) == {run_of_event(m, "o-x")} and m.finished.unstored == 1
    assert a.digest() == b.digest()
    a.close()
    b.close()


def run_of_event(m: RunnerStateMachine, event_id: str) -> str:
    m.flush()
    return m.con.execute("SELECT run_id FROM runs WHERE event_id = ?", [event_id]).fetchone()[0]


def test_snapshot_restore_keeps_the_same_removals(tmp_path):
    a = machine(tmp_path, "a")
    log = Log(a)
    setup_w3(log)
    confirm = []
    for i in range(6):
        effects = log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"), ts=T0 + i)
        if i % 2 == 0:
            confirm += stored(effects)
    log.apply(entries.EFFECTS_DONE, {"stored": confirm, "outbox": []}, ts=T0 + 10)
    log.apply(entries.EVENT_RECEIVED, order("o-x", card="cx"), ts=T0 + 2 * HOUR)
    writer = a.snapshot()
    writer.write(tmp_path / "snap")
    writer.close()
    c = machine(tmp_path, "c")
    c.restore(tmp_path / "snap")
    assert c.finished.candidates() == a.finished.candidates()
    assert c.finished.unstored == a.finished.unstored == 4  # o-1, o-3, o-5 and o-x
    rest = Log(a, c)
    rest.offsets = iter(range(log.history[-1].offset + 1, 10**9))
    rest.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR + 1)
    assert len(held(a)) == len(held(c)) == 4 and tables_digest(a) == tables_digest(c)
    unconfirmed = [[r, offset_of(a, r)] for r in sorted(held(a))]
    rest.apply(entries.EFFECTS_DONE, {"stored": unconfirmed, "outbox": []},
               ts=T0 + 2 * HOUR + 2)
    assert held(a) == held(c) == {run_of_event(a, "o-x")}
    assert tables_digest(a) == tables_digest(c)
    a.close()
    c.close()


def test_an_app_answer_after_the_run_left_is_refused_alike(tmp_path):
    a, b = machine(tmp_path, "a", run_ms=0), machine(tmp_path, "b", run_ms=0)
    log = Log(a, b)
    setup_w3(log, scorer="demo_score")
    effects = log.apply(entries.EVENT_RECEIVED, order("o-a"), ts=T0)
    run = run_of(effects)
    assert any(isinstance(e, CallApp) for e in effects)
    timeout = log.apply(entries.TICK, {}, ts=T0 + 300)  # the app never answered
    log.apply(entries.EFFECTS_DONE, {"stored": stored(timeout), "outbox": []}, ts=T0 + 301)
    log.apply(entries.EVENT_RECEIVED, order("o-b", card="c2"), ts=T0 + 2 * HOUR)
    log.apply(entries.TICK, {}, ts=T0 + 2 * HOUR)
    assert run["run_id"] not in held(a) and not held(a, "app_tasks") - held(a)
    answer = {"run_id": run["run_id"], "node_id": "score", "result": {"payment_abuse": 1}}
    late = reply(log.apply(entries.APP_COMPLETED, answer, ts=T0 + 2 * HOUR + 5))
    assert not late.ok and late.result["status"] == 404 and late.field == "node_id"
    assert reply(log.results[1]) == late and a.digest() == b.digest()
    a.close()
    b.close()


def test_a_run_that_left_is_read_from_the_run_store(tmp_path):
    sm = machine(tmp_path, "a", run_ms=0)
    store = RocksRunStore(tmp_path / "runs")
    svc = SimpleNamespace(sm=sm, reader=sm.reader, run_store=store)
    log = Log(sm)
    setup_w3(log)
    effects = log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0)
    run = run_of(effects)
    store.put_many([RunRecord(**e.record) for e in effects if isinstance(e, StoreRun)])
    log.apply(entries.EFFECTS_DONE, {"stored": stored(effects), "outbox": []}, ts=T0 + 1)
    hot = operations.get_run(svc, run["run_id"])
    log.apply(entries.EVENT_RECEIVED, order("o-2", card="c2"), ts=T0 + 2 * HOUR)
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": []}, ts=T0 + 2 * HOUR)
    assert run["run_id"] not in held(sm)
    cold = operations.get_run(svc, run["run_id"])
    same = ("run_id", "event_id", "workflow_id", "workflow_version", "state", "decision",
            "path", "explanation", "metrics", "scores", "apps", "offset", "started_ts",
            "updated_ts")
    assert {k: cold[k] for k in same} == {k: hot[k] for k in same}
    assert explore.run_detail(svc, run["run_id"])["event"]["event_id"] == "o-1"
    # Forgotten by dedup too: the event's runs come from the run store, by its event id.
    (listed,) = operations.event_runs(svc, "o-1")
    assert {k: listed[k] for k in same} == {k: hot[k] for k in same}
    with pytest.raises(NotFound):
        operations.event_runs(svc, "o-never")
    store.close()
    sm.close()


class LocalService:
    """What ``runner.operations`` needs of a ``Service``: entries applied in-process to one
    state machine through ``Log`` (log time ``ts``), a real RocksDB run store."""

    reply_of = staticmethod(Service.reply_of)

    def __init__(self, sm: RunnerStateMachine, store: RocksRunStore, log: Log) -> None:
        self.sm, self.run_store, self.log, self.reader = sm, store, log, sm.reader
        self.settings = SimpleNamespace(app_secrets={})
        self.ts = T0

    async def submit(self, kind: str, payload: dict, timeout_s: float | None = None, *,
                     raw: bytes | None = None) -> Applied:
        self.effects = self.log.apply(kind, payload, ts=self.ts)
        return Applied(self.log.history[-1].offset, 1, self.effects)

    def store_effects(self, effects: list) -> None:
        """The leader's part: write the runs, then confirm them in the log."""
        self.run_store.put_many([RunRecord(**e.record) for e in effects
                                 if isinstance(e, StoreRun)])
        self.log.apply(entries.EFFECTS_DONE, {"stored": stored(effects), "outbox": []},
                       ts=self.ts)


@pytest.mark.anyio
async def test_a_late_answer_for_a_run_that_left_gets_409_with_its_decision(tmp_path):
    sm = machine(tmp_path, "a", run_ms=0)
    log = Log(sm)
    svc = LocalService(sm, RocksRunStore(tmp_path / "runs"), log)
    setup_w3(log, scorer="demo_score")
    app_run = run_of(log.apply(entries.EVENT_RECEIVED, order("o-app"), ts=T0))
    svc.store_effects(log.apply(entries.TICK, {}, ts=T0 + 300))  # the app never answered
    review = run_of(log.apply(entries.EVENT_RECEIVED, review_order("o-rev"), ts=T0 + 400))
    assert review["waiting_for"] == "app"  # the scorer first, then the review
    svc.ts = T0 + 500
    scored = await operations.app_completed(svc, review["run_id"], "score",
                                            {"payment_abuse": 70, "score": 70})
    assert scored["waiting_for"] == "review"
    await operations.claim(svc, review["run_id"], "review", "ann")
    decided = await operations.decide(svc, review["run_id"], "review", "ann", "accept", False)
    svc.store_effects(svc.effects)
    assert decided["decision"] == "approve"
    # While held, a late answer is ignored (200) as it always was.
    late = await operations.app_completed(svc, app_run["run_id"], "score", {"score": 1})
    assert late["state"] == "decided" and late["run_id"] == app_run["run_id"]
    svc.ts = T0 + 2 * HOUR  # dedup and the run retention let both go
    log.apply(entries.EVENT_RECEIVED, order("o-late", card="c-late"), ts=svc.ts)
    log.apply(entries.TICK, {}, ts=svc.ts)
    assert not {app_run["run_id"], review["run_id"]} & held(sm)
    with pytest.raises(RunFinished) as app_late:
        await operations.app_completed(svc, app_run["run_id"], "score", {"score": 1})
    timed_out = svc.run_store.get(app_run["run_id"])
    assert app_late.value.status == 409 and app_late.value.decision == timed_out.decision
    assert app_run["run_id"] in app_late.value.message and "finished" in app_late.value.message
    for action in (operations.claim(svc, review["run_id"], "review", "bob"),
                   operations.decide(svc, review["run_id"], "review", "ann", "decline", True)):
        with pytest.raises(RunFinished) as gone:
            await action
        assert (gone.value.run_id, gone.value.decision) == (review["run_id"], "approve")
    response = render(gone.value)
    body = orjson.loads(response.body)
    assert response.status_code == 409 and body["detail"][0]["loc"] == ["body", "run_id"]
    assert body["run"] == {"run_id": review["run_id"], "state": "decided",
                           "decision": "approve"}
    with pytest.raises(NotFound):  # a run nobody ever had is still a 404
        await operations.app_completed(svc, "r_never", "score", {"score": 1})
    svc.run_store.close()
    sm.close()


class StatelessW1Engine:
    """W1's metric names with fixed values: a restored replica computes the same as the others
    without the engine being part of the snapshot (decisions follow the demo score)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def define(self, text: str) -> list[str]:
        names = [n for n in ("card_count_5m", "card_sum_5m", "merchant_avg_5m") if n in text]
        self.names += names
        return names

    def ingest(self, stream: str, event: dict, ts_ms: int) -> dict:
        return {"card_count_5m": 1, "card_sum_5m": 1, "merchant_avg_5m": 1.0}


@pytest.mark.parametrize("seed", range(3))
def test_random_histories_remove_the_same_runs_on_replicas_and_restored_nodes(
        tmp_path, monkeypatch, seed):
    """Orders (some to review, some sent twice), partial confirmations, Ticks, reviews and
    jumps of log time, with tiny per-entry bounds; a node restored from a snapshot midway
    joins: every node holds the same candidates after every entry and the same rows."""
    monkeypatch.setattr(retention, "runs_evicted_per_entry_max", 2)
    monkeypatch.setattr(retention, "runs_scanned_per_entry_max", 3)
    rng = random.Random(seed)

    def node(name: str) -> RunnerStateMachine:
        return RunnerStateMachine(tmp_path / name, engine=StatelessW1Engine(),
                                  dedup_retention_ms=30 * MINUTE, run_retention_ms=20 * MINUTE)

    nodes = [node("a"), node("b")]
    log = Log(*nodes)
    setup_w3(log)
    ts, unconfirmed, waiting, sent = T0, [], [], []
    restore_at = rng.randrange(40, 100)
    for step in range(140):
        ts += rng.choice([1, 1000, 5 * MINUTE, 30 * MINUTE, 6 * HOUR])
        roll = rng.random()
        if roll < 0.45:
            event_id = rng.choice(sent) if sent and rng.random() < 0.2 else f"o-{step}"
            body = review_order(event_id) if rng.random() < 0.3 else order(event_id)
            effects = log.apply(entries.EVENT_RECEIVED, body, ts=ts)
            sent.append(event_id)
            unconfirmed += stored(effects)
            waiting += [r["run_id"] for r in reply(effects).runs if r["state"] == "waiting"]
        elif roll < 0.75:
            rng.shuffle(unconfirmed)
            cut = rng.randrange(len(unconfirmed) + 1)
            confirm, unconfirmed = unconfirmed[:cut], unconfirmed[cut:]
            log.apply(entries.EFFECTS_DONE, {"stored": confirm, "outbox": []}, ts=ts)
        elif roll < 0.9:
            unconfirmed += stored(log.apply(entries.TICK, {}, ts=ts))
        elif waiting:
            task = {"run_id": waiting.pop(rng.randrange(len(waiting))), "node_id": "review",
                    "user": "ann"}
            log.apply(entries.REVIEW_CLAIMED, task, ts=ts)
            unconfirmed += stored(log.apply(entries.REVIEW_DECIDED,
                                            dict(task, outcome="accept"), ts=ts))
        if step == restore_at:
            writer = nodes[0].snapshot()
            writer.write(tmp_path / "snap")
            writer.close()
            restored = node("c")
            restored.restore(tmp_path / "snap")
            nodes.append(restored)
            log.machines = tuple(nodes)
        first = nodes[0].finished
        assert all((m.finished.candidates(), m.finished.unstored)
                   == (first.candidates(), first.unstored) for m in nodes)
        assert len({m.digest() for m in nodes}) == 1, f"seed {seed} step {step}"
        if step % 10 == 9:  # the digest apply keeps is the one of the rows DuckDB holds
            assert {tables_digest(m) for m in nodes} == {nodes[0].digest()}, \
                f"seed {seed} step {step}"
    assert len(nodes) == 3
    held_runs = hold_count(nodes[0])["runs"]
    assert held_runs < len(sent)  # the retention removed some: the test can tell
    for m in nodes:
        m.close()


def test_a_duplicate_gets_the_runs_of_the_sighting_dedup_holds_only(tmp_path):
    """An id sent again after the dedup retention is a new event; while the run retention
    still holds the first sighting's run, a duplicate of the second gets the second's run."""
    a = machine(tmp_path, "a", run_ms=24 * HOUR, dedup_ms=HOUR)
    log = Log(a)
    setup_w3(log)
    first = run_of(log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0))
    log.apply(entries.EVENT_RECEIVED, order("o-2", card="c2"), ts=T0 + 2 * HOUR)  # forgets o-1
    second = run_of(log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0 + 2 * HOUR + 1))
    assert second["run_id"] != first["run_id"]
    a.flush()  # the duplicate reads DuckDB, which holds both sightings' runs
    again = reply(log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0 + 2 * HOUR + 2))
    assert again.result["duplicate"] and [r["run_id"] for r in again.runs] == [second["run_id"]]
    assert held(a) >= {first["run_id"], second["run_id"]}
    a.close()


def test_a_sent_webhook_leaves_the_outbox_even_after_its_run_left(pair):
    """Webhooks are not waited for, so a run can be decided, stored and gone before its webhook
    is confirmed sent: the confirmation must still remove the outbox row (a leak otherwise),
    and a pending one stays for the next leader to send."""
    from tests.runner.test_one_walk import definition

    a, b = pair
    log = Log(a, b)
    log.apply(entries.WORKFLOW_PUBLISHED, {"workflow_id": "wh", "definition": definition()})
    hooks = []
    for i in range(2):
        effects = log.apply(entries.EVENT_RECEIVED, order(f"w-{i}", amount=9000), ts=T0 + i)
        hooks += [e.effect_id for e in effects if type(e).__name__ == "SendWebhook"]
    assert len(hooks) == 2
    sent = hooks[0]
    log.apply(entries.EFFECTS_DONE, {"stored": [], "outbox": [sent]}, ts=T0 + 10)
    for m in (a, b):
        m.flush()
        pending = {e for (e,) in m.con.execute("SELECT effect_id FROM outbox").fetchall()}
        assert pending == {hooks[1]}
    started = log.apply(entries.LEADER_STARTED, {}, ts=T0 + 11)
    assert [e.effect_id for e in started if type(e).__name__ == "SendWebhook"] == [hooks[1]]
    assert a.digest() == b.digest()
