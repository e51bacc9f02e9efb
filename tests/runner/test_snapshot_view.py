"""A snapshot never waits for DuckDB on the apply thread: its view opens on the flusher once
the rows applied before the capture landed, and holds nothing applied after it."""

from __future__ import annotations

import pytest

from runner.errors import InvariantViolation
from runner.state import buffer, digest, entries, queries
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_machine import T0, Log, order, reply, setup_w3
from tests.runner.test_one_walk import definition as webhook_definition


def machine(tmp_path, name: str) -> RunnerStateMachine:
    return RunnerStateMachine(tmp_path / name, engine=BruteForceW1Engine())


def restored(tmp_path, snap) -> tuple[int, int, list[str]]:
    """The restored state's sum of row hashes (checked against a full scan), its runs and its
    active workflows (the fake engine keeps no snapshot: its part of the digest is left out)."""
    m = machine(tmp_path, "restored")
    try:
        m.restore(snap)
        assert m._rows_total == digest.scan(m.con).total
        (runs,) = m.con.execute("SELECT count(*) FROM runs").fetchone()
        active = [r[0] for r in m.con.execute(
            "SELECT workflow_id FROM workflow_active ORDER BY workflow_id").fetchall()]
        return m._rows_total, runs, active
    finally:
        m.close()


def test_a_snapshot_holds_the_pending_rows_and_nothing_applied_after_it(tmp_path):
    m = machine(tmp_path, "a")
    log = Log(m)
    setup_w3(log)
    for i in range(30):
        assert reply(log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", amount=100 + i),
                               ts=T0 + i)).ok
    assert m._buffer.current.rows(), "the orders' rows must still be pending"
    writer = m.snapshot()
    at_capture, rows_at_capture = m.digest(), m._rows_total
    # Orders into the next generation, then a publish: its handler writes DuckDB itself
    # (after a flush), which the captured view must not see either.
    for i in range(30, 40):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}"), ts=T0 + i)
    assert reply(log.apply(entries.WORKFLOW_PUBLISHED,
                           {"workflow_id": "wh", "definition": webhook_definition()})).ok
    assert m.digest() != at_capture
    writer.write(tmp_path / "snap")
    assert writer.digest() == at_capture
    writer.close()
    m.close()
    assert restored(tmp_path, tmp_path / "snap") == (rows_at_capture, 30, ["w3_demo"])


def test_the_apply_thread_never_flushes_for_a_snapshot(tmp_path, monkeypatch):
    m = machine(tmp_path, "a")
    log = Log(m)
    setup_w3(log)
    log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0)
    monkeypatch.setattr(m._buffer, "sync", lambda: pytest.fail("snapshot waited for a flush"))
    writer = m.snapshot()
    monkeypatch.undo()
    writer.write(tmp_path / "snap")
    writer.close()
    m.close()
    assert restored(tmp_path, tmp_path / "snap")[1] == 1


def test_a_failed_flush_fails_the_snapshot_instead_of_hanging_it(tmp_path, monkeypatch):
    m = machine(tmp_path, "a")
    log = Log(m)
    setup_w3(log)

    def broken(cur, gen):
        raise RuntimeError("disk full")

    monkeypatch.setattr(buffer, "_write", broken)
    log.apply(entries.EVENT_RECEIVED, order("o-1"), ts=T0)
    writer = m.snapshot()
    with pytest.raises(InvariantViolation, match="disk full"):
        writer.write(tmp_path / "snap")
    writer.close()  # nothing to release: the view never opened
    later = m._buffer.when_landed(lambda: "never")
    with pytest.raises(InvariantViolation, match="disk full"):
        later.result(timeout=10)
    m.close()


def test_work_queued_behind_the_generations_runs_after_them_in_order(tmp_path):
    m = machine(tmp_path, "a")
    log = Log(m)
    setup_w3(log)
    seen = []
    for i in range(3):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}"), ts=T0 + i)
        cursor = m.reader()
        seen.append(m._buffer.when_landed(
            lambda cursor=cursor: cursor.execute("SELECT count(*) FROM runs").fetchone()[0]))
    assert [f.result(timeout=10) for f in seen] == [1, 2, 3]
    m.close()



def test_parts_are_zstd_in_scan_order_and_a_restore_lists_rows_by_key(tmp_path):
    # Run ids are hashes: applied order is not key order, so the dump is not sorted by key;
    # whatever reads the restored tables must sort for itself.
    import pyarrow.parquet as pq

    m = machine(tmp_path, "a")
    log = Log(m)
    setup_w3(log)
    for i in range(60):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", amount=100 + i), ts=T0 + i)
    m.flush()
    listed = m.con.execute("SELECT run_id, decision FROM runs ORDER BY run_id").fetchall()
    of_event = queries.runs_for_event(m.con.cursor(), "o-7")
    writer = m.snapshot()
    writer.write(tmp_path / "snap")
    writer.close()
    m.close()
    part = pq.ParquetFile(tmp_path / "snap" / "runs.parquet")
    assert {part.metadata.row_group(0).column(c).compression
            for c in range(part.metadata.num_columns)} == {"ZSTD"}
    dumped = part.read(columns=["run_id"]).column("run_id").to_pylist()
    assert dumped != sorted(dumped), "the dump was sorted: the test proves nothing"
    r = machine(tmp_path, "r")
    try:
        r.restore(tmp_path / "snap")
        assert r.con.execute(
            "SELECT run_id, decision FROM runs ORDER BY run_id").fetchall() == listed
        assert queries.runs_for_event(r.con.cursor(), "o-7") == of_event
    finally:
        r.close()
