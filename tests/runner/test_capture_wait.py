"""A checkpoint's capture that waits for the buffer's own next hand-off (``capture_wait_s``):
it forces no flush at the checkpoint's offset, and it holds exactly the state at that offset."""

from __future__ import annotations

import itertools
import threading

import pytest

from runner.state import buffer, entries
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_machine import T0, Log, order, setup_w3

result_timeout_s = 60  # a bound for a hung flusher, never a figure the test checks
HOT_TABLES = {"runs": "run_id", "steps": "run_id, seq", "decisions": "run_id",
              "events_seen": "event_id"}


def _rows(view) -> dict[str, list]:
    return {t: view.execute(f"SELECT * FROM {t} ORDER BY {k}").fetchall()
            for t, k in HOT_TABLES.items()}


@pytest.fixture
def machines(tmp_path, monkeypatch):
    monkeypatch.setattr(buffer, "handoff_entries", 8)
    held = RunnerStateMachine(tmp_path / "held", engine=BruteForceW1Engine(),
                              capture_wait_s=result_timeout_s)
    forced = RunnerStateMachine(tmp_path / "forced", engine=BruteForceW1Engine())
    yield held, forced
    held.close()
    forced.close()


def _feed(log: Log, start: int, n: int) -> None:
    for i in range(start, start + n):
        log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i % 5}"),
                  ts=T0 + i * 1000)


def _captured(machine: RunnerStateMachine, orders: int):
    """A capture after the W3 setup and ``orders`` orders."""
    log = Log(machine)
    setup_w3(log)
    _feed(log, 0, orders)
    return machine.snapshot()


def _runs(view) -> tuple:
    return view.execute("SELECT count(*) FROM runs").fetchone()


def test_a_held_capture_waits_for_the_next_hand_off_and_sees_the_captured_offset(machines):
    held, forced = machines
    log = Log(held, forced)
    setup_w3(log)
    _feed(log, 0, 9)
    held.sync()
    started, gate = threading.Event(), threading.Event()

    def blocked() -> None:
        started.set()
        gate.wait(result_timeout_s)

    held._buffer.when_landed(blocked)
    assert started.wait(result_timeout_s)  # the flusher waits here, its queue empty
    _feed(log, 9, 2)
    assert held.applied_offset % buffer.handoff_entries not in (0, buffer.handoff_entries - 1)
    assert held._buffer.current.rows(), "nothing pending at the capture: a weak test"
    held_writer, forced_writer = held.snapshot(), forced.snapshot()
    queued = list(held._buffer._queue.queue)
    assert queued == [buffer._HELD], queued  # the capture's rows were not handed off
    assert held._buffer.current.rows() == 0  # held apart: later rows start a new generation
    gate.set()
    view = held_writer._cursor
    after = Log(held, forced)
    after.offsets = itertools.count(held.applied_offset + 1)
    _feed(after, 11, buffer.handoff_entries)  # crosses the next span boundary: a hand-off
    held_view, forced_view = view.result(result_timeout_s), forced_writer._view()
    assert _rows(held_view) == _rows(forced_view)  # the captured offset's rows, no later one
    assert held_writer.delta_base == forced_writer.delta_base
    held_writer.close()
    forced_writer.close()
    held.sync()
    forced.sync()
    assert _rows(held.con) == _rows(forced.con)
    assert held.digest() == forced.digest()


def test_a_reader_syncing_meanwhile_releases_the_held_capture(machines):
    held, _ = machines
    writer = _captured(held, 11)
    held.sync()  # e.g. a review reader: every applied row goes to DuckDB, the capture's first
    assert _runs(writer._cursor.result(result_timeout_s)) == (11,)
    writer.close()


def test_with_no_hand_off_coming_the_flusher_stops_waiting(tmp_path, monkeypatch):
    monkeypatch.setattr(buffer, "handoff_entries", 1_000)
    m = RunnerStateMachine(tmp_path / "m", engine=BruteForceW1Engine(), capture_wait_s=0.05)
    try:
        writer = _captured(m, 3)  # no entry follows: only the wait's end hands the rows off
        assert _runs(writer._cursor.result(result_timeout_s)) == (3,)
        writer.close()
    finally:
        m.close()


def test_a_capture_without_a_wait_hands_off_at_once(machines):
    _, forced = machines
    writer = _captured(forced, 11)
    assert forced._buffer.current.rows() == 0
    assert _runs(writer._view()) == (11,)
    writer.close()

