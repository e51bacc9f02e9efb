"""The step context of a run: the order's data, with its event id added only for a version
whose criteria can read ``event.event_id`` (a copy of the data per order otherwise saved)."""

import pytest

from runner.demo import w3_definition
from runner.state import flows


def run_of(data):
    return {"event": {"event_id": "o-1", "type": "order", "ts": None, "data": data},
            "scores": {}, "metrics": {"card_count_5m": 1.0}, "apps": {}}


def with_criterion(criteria):
    definition = w3_definition()
    definition["nodes"][0]["edges"][0]["criteria"] = criteria
    return flows.compile(definition, 1, None)


def test_w3_walks_on_the_data_itself():
    w3 = flows.compile(w3_definition(), 1, None)
    run = run_of({"amount": 5, "country": "US"})
    assert not w3.reads_event_id
    assert flows.context(run, compiled=w3).event is run["event"]["data"]
    assert "event_id" not in run["event"]["data"]


@pytest.mark.parametrize("criteria", ["event.event_id == 'o-1'", "has(event.event_id)",
                                      "size(event) > 0 && event.event_id != 'x'"])
def test_a_version_reading_the_event_id_sees_it(criteria):
    version = with_criterion(criteria)
    assert version.reads_event_id
    run = run_of({"amount": 5, "country": "US"})
    ctx = flows.context(run, compiled=version)
    assert ctx.event["event_id"] == "o-1"
    assert "event_id" not in run["event"]["data"]  # the run's event is never changed
    walk = flows.advance(version, ctx, flows.root(version))
    assert walk.steps[0].edge_id == "block_card_velocity"  # the criterion was true


def test_an_event_id_in_the_data_wins():
    version = with_criterion("event.event_id == 'mine'")
    run = run_of({"event_id": "mine"})
    assert flows.context(run, compiled=version).event is run["event"]["data"]
    assert flows.advance(version, flows.context(run, compiled=version),
                         "event").steps[0].edge_id == "block_card_velocity"
