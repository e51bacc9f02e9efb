"""The soak's checker on handmade histories: each broken promise is caught, a clean run passes."""

from __future__ import annotations

from bench.soak_check import LogRecord, check

EV = "EventReceived"


def ok(eid, offset, run="r", decision="approve", duplicate=False):
    return {"type": "ok", "id": eid, "offset": offset, "duplicate": duplicate,
            "runs": [{"run_id": f"{run}-{eid}", "decision": decision}]}


def base_log():
    return [LogRecord(0, 1, 0, "replog.LeaderStarted"), LogRecord(1, 1, 1, EV, "a"),
            LogRecord(2, 1, 2, EV, "b")]


def test_a_clean_history_is_valid():
    history = [{"type": "invoke", "id": "a"}, ok("a", 1), {"type": "invoke", "id": "b"},
               ok("b", 2), ok("a", 1, duplicate=True),
               {"type": "digest", "node": "n1", "offset": 2, "digest": "x"},
               {"type": "digest", "node": "n2", "offset": 2, "digest": "x"}]
    v = check(history, base_log(), {"r-a", "r-b"})
    assert v.valid, v.problems()
    assert v.acknowledged == 3 and v.digest_offsets_compared == 1


def test_a_lost_write_is_caught():
    v = check([ok("a", 1), ok("c", 7)], base_log(), {"r-a", "r-c"})
    assert not v.valid and len(v.lost) == 1 and "c acknowledged at offset 7" in v.lost[0]


def test_an_ack_at_an_offset_holding_another_event_is_a_lost_write():
    v = check([ok("a", 2)], base_log(), {"r-a"})
    assert v.lost


def test_a_duplicate_run_is_caught():
    log = [*base_log(), LogRecord(3, 1, 3, EV, "a")]  # a client retry appended "a" again
    v = check([ok("a", 1), ok("a", 3)], log, {"r-a"})
    assert not v.valid and v.duplicate_runs
    # The same retry answered as a duplicate of the first entry is fine.
    assert check([ok("a", 1), ok("a", 1, duplicate=True)], log, {"r-a"}).valid


def test_an_event_answered_with_different_runs_is_a_duplicate():
    v = check([ok("a", 1), {**ok("a", 1, run="other"), "duplicate": True}], base_log(),
              {"r-a", "other-a"})
    assert v.duplicate_runs


def test_a_fenced_apply_is_caught():
    # Writer 1 paused; writer 2 took over at offset 3; writer 1's late entry landed at 4.
    log = [*base_log(), LogRecord(3, 2, 0, "replog.LeaderStarted"), LogRecord(4, 1, 3, EV, "z")]
    v = check([ok("z", 4)], log, {"r-z"})
    assert not v.valid and v.fenced_applied and "writer 1" in v.fenced_applied[0]


def test_digests_that_differ_at_an_offset_are_caught():
    history = [{"type": "digest", "node": "n1", "offset": 10, "digest": "x"},
               {"type": "digest", "node": "n2", "offset": 10, "digest": "y"},
               {"type": "digest", "node": "n3", "offset": 20, "digest": "z"}]
    v = check(history, base_log(), set())
    assert v.digest_mismatches == ["digests differ at offset 10: {'n1': 'x', 'n2': 'y'}"]


def test_a_decided_run_missing_from_the_store_is_caught():
    v = check([ok("a", 1), ok("b", 2, decision=None)], base_log(), set())
    assert v.missing_in_store == ["store: decided run r-a of a is not in the run store"]
