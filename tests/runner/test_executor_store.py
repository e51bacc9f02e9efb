"""runner.executor: run-store writes are batched, one write per run (its newest version), and
confirmed; a failing store is retried, never dropped."""

from __future__ import annotations

import time

from runner.executor import EffectExecutor
from runner.runstore.memory import MemoryRunStore
from runner.settings import Settings
from runner.state.effects import StoreRun
from runner.telemetry import Telemetry

wait_s = 10


def _run(run_id: str, offset: int, state: str = "decided") -> dict:
    return {"run_id": run_id, "event_id": f"e-{run_id}", "event_type": "order",
            "workflow_id": "wf", "version": 1, "state": state, "event": {"data": {}},
            "path": [], "decision": "approve" if state == "decided" else None, "metrics": {},
            "scores": {}, "apps": {}, "started_ts": 1, "updated_ts": offset, "offset": offset}


class CountingStore(MemoryRunStore):
    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.writes: list[list[tuple[str, int]]] = []
        self.terms: list[int | None] = []  # the writer id each write carried
        self.failures = failures

    def put_many(self, runs, writer_id=None):
        if self.failures:
            self.failures -= 1
            raise OSError("store down")
        self.writes.append([(r.run_id, r.offset) for r in runs])
        self.terms.append(writer_id)
        super().put_many(runs, writer_id)


def _executor(store, tmp_path) -> EffectExecutor:
    return EffectExecutor(Settings(data_dir=tmp_path), store, lambda *a: None, lambda v: None,
                          Telemetry(), {}, {})


def _confirmed(ex: EffectExecutor, runs: int) -> dict[str, int]:
    got: dict[str, int] = {}
    deadline = time.monotonic() + wait_s
    while len(got) < runs and time.monotonic() < deadline:
        taken = ex.take_confirmations()
        got.update({run_id: offset for run_id, offset in (taken or {}).get("stored", [])})
        time.sleep(0.01)
    return got


def test_versions_handed_over_together_are_written_once_each_newest(tmp_path):
    store = CountingStore()
    ex = _executor(store, tmp_path)
    try:
        effects = [StoreRun(_run("r1", 5, "waiting")), StoreRun(_run("r2", 6)),
                   StoreRun(_run("r1", 7)), StoreRun(_run("r3", 8))]
        ex.handle(None, effects, leader=True)  # faster than the writer's linger
        assert _confirmed(ex, 3) == {"r1": 7, "r2": 6, "r3": 8}
        assert store.writes == [[("r1", 7), ("r2", 6), ("r3", 8)]]
        assert store.get("r1").state == "decided" and ex.store_backlog() == 0
    finally:
        ex.close()


def test_a_failing_store_is_retried_until_written(tmp_path):
    store = CountingStore(failures=2)
    ex = _executor(store, tmp_path)
    try:
        ex.handle(None, [StoreRun(_run("r1", 3))], leader=True)
        assert _confirmed(ex, 1) == {"r1": 3}
        assert store.writes == [[("r1", 3)]] and ex.store_error is None
    finally:
        ex.close()


def test_a_follower_writes_nothing(tmp_path):
    store = CountingStore()
    ex = _executor(store, tmp_path)
    try:
        ex.handle(None, [StoreRun(_run("r1", 3))], leader=False)
        time.sleep(0.1)
        assert store.writes == [] and ex.store_backlog() == 0
    finally:
        ex.close()


def test_each_write_carries_the_term_its_versions_were_produced_in(tmp_path):
    """A node led again may still hold versions of its earlier term: they are written under
    that term (so its successor's writes, in between, are not hidden by them), each run once at
    its newest version, the earlier term first."""
    store = CountingStore()
    ex = _executor(store, tmp_path)
    try:
        ex.handle(None, [StoreRun(_run("r1", 5, "waiting")), StoreRun(_run("r2", 6))],
                  leader=True, writer_id=3)
        ex.handle(None, [StoreRun(_run("r1", 9)), StoreRun(_run("r4", 10))],
                  leader=True, writer_id=7)
        assert _confirmed(ex, 3) == {"r1": 9, "r2": 6, "r4": 10}
        assert list(zip(store.terms, store.writes, strict=True)) == [
            (3, [("r2", 6)]), (7, [("r1", 9), ("r4", 10)])]
    finally:
        ex.close()
