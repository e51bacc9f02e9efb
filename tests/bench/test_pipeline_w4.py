"""bench/pipeline_w4's verdicts: a target counts as met only on the real workload with parity,
never from a quick or reduced run or a run whose values disagree with the oracle."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from bench import pipeline_w4 as w4  # noqa: E402
from bench.harness import Report  # noqa: E402

MONTH = 15_000_000
SMALL = 1_000_000
SAMPLE = (0, 120_000)
EVERY = (0, SMALL)


def p5(**kw):
    args = {"quick": False, "size": "month", "events": MONTH, "metrics": 405,
            "sample": SAMPLE, "every": EVERY}
    args.update(kw)
    return w4.verdict(60.0, w4.P5_TARGET_S, w4.p5_gates(**args))


def test_p5_met_only_with_every_gate():
    assert p5() == (True, [])


@pytest.mark.parametrize(("change", "gate"), [
    ({"quick": True}, "not_quick"),
    ({"size": "small", "events": SMALL}, "full_month"),
    ({"size": 7_500_000, "events": 7_500_000}, "full_month"),
    ({"events": MONTH - 1}, "full_month"),
    ({"metrics": 2}, "w2_405_features"),
    ({"sample": (1, 120_000)}, "parity_month_sample"),
    ({"sample": (0, 99_999)}, "parity_month_sample"),
    ({"every": None}, "parity_every_value_small"),
    ({"every": (3, SMALL)}, "parity_every_value_small"),
    ({"every": (0, 10_000)}, "parity_every_value_small"),
])
def test_p5_not_met_when_a_gate_fails(change, gate):
    met, failed = p5(**change)
    assert not met and failed == [gate]


def test_p5_not_met_when_slow_even_with_every_gate():
    gates = w4.p5_gates(False, "month", MONTH, 405, SAMPLE, EVERY)
    assert w4.verdict(w4.P5_TARGET_S + 1, w4.P5_TARGET_S, gates) == (False, [])


def test_p6_quick_or_disagreeing_runs_never_meet():
    assert w4.verdict(1.0, 10.0, w4.p6_gates(False, SMALL, SMALL, True)) == (True, [])
    assert w4.verdict(1.0, 10.0, w4.p6_gates(True, SMALL, SMALL, True)) == (False, ["not_quick"])
    assert w4.verdict(1.0, 10.0, w4.p6_gates(False, SMALL, SMALL, False)) == \
        (False, ["agrees_with_duckdb"])
    assert w4.verdict(1.0, 10.0, w4.p6_gates(False, 10_000, SMALL, True)) == \
        (False, ["full_orders"])


def test_the_report_says_which_gate_failed():
    report = Report("pipeline_w4", quick=True)
    run = {"seconds": 3.0, "size": "month", "events": MONTH, "metrics": 405,
           "parity": (0, 150_000), "parity_note": "sample"}
    w4.p5_target(report, True, run, None)
    t = report.targets["P5"]
    assert t["met"] is False and t["value"] == 3.0
    assert t["gates"]["not_quick"] is False and t["gates"]["parity_every_value_small"] is False
    assert "not_quick" in t["note"] and "parity_every_value_small" in t["note"]


def test_p5_on_a_smaller_data_set_is_not_measured():
    report = Report("pipeline_w4", quick=False)
    run = {"seconds": 3.0, "size": "small", "events": SMALL, "metrics": 405,
           "parity": (0, SMALL), "parity_note": "every value"}
    w4.p5_target(report, False, run, None)
    assert report.targets["P5"]["met"] is False and report.targets["P5"]["value"] == 0.0


def test_a_run_without_the_duckdb_peer_says_so():
    report = Report("pipeline_w4", quick=False)
    run = {"seconds": 3.0, "size": "month", "events": MONTH, "metrics": 405,
           "parity": (0, 150_000), "parity_note": "sample", "duckdb_peer": False}
    w4.p5_target(report, False, run, {"parity": EVERY, "size": "small",
                                      "parity_note": "every value"})
    assert "DuckDB peer was not run" in report.targets["P5"]["note"]
