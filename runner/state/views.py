"""What readers get of a run: the API's view, the run store's record, the explanation.

Apply hands out the run itself (the dict it holds: never changed once the entry applied, a
resumed run is a copy) in ``Reply.runs``, ``RunChanged`` and ``StoreRun``, and keeps it for
the readers of pending runs (``RowBuffer.view``); a run read back from DuckDB has the same
keys. Its path holds the steps apply recorded (``runner.state.steps.Step``) or, restored from
DuckDB, their dicts. Nothing here runs inside apply: the API calls ``presented`` for what it
answers (on the HTTP thread), the run store writer calls ``record_of``.
"""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from runner.state.steps import Step, path_dicts
from workflows import StepResult

RUN_COLUMNS = ("run_id, event_id, event_type, workflow_id, version, state, node_id, decision, "
               "started_ts, updated_ts, offset_, stored_offset, event, metrics, scores, apps, "
               "waiting_for")
_RUN_KEYS = tuple("offset" if c == "offset_" else c
                  for c in (c.strip() for c in RUN_COLUMNS.split(",")))


def run_dict(row: tuple) -> dict:
    """A runs row as the run dict apply holds (its path not included)."""
    run = dict(zip(_RUN_KEYS, row, strict=True))
    for k in ("event", "metrics", "scores", "apps"):
        run[k] = orjson.loads(run[k]) if isinstance(run[k], str) else run[k]
    return run


def steps_of(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict]:
    rows = con.execute("SELECT trace FROM steps WHERE run_id = ? ORDER BY seq",
                       [run_id]).fetchall()
    return [orjson.loads(t) for (t,) in rows]


def run_of_row(row: tuple, con: duckdb.DuckDBPyConnection | None = None) -> dict:
    """A runs row as a run, its path read from ``con`` (none without it)."""
    run = run_dict(row)
    run["path"] = steps_of(con, run["run_id"]) if con is not None else []
    return run


def explain(path: list) -> list[str]:
    """One sentence per step (a recorded ``Step`` or a dict): which edge was taken and why.
    A step's sentence depends on its result only, so a ``Step``'s is made once per result
    (``StepResult.derived``): most orders take the precomputed results of their version."""
    return [s.result.derived("sentence", _result_sentence) if s.__class__ is Step
            else sentence(s) for s in path]


def _result_sentence(result: StepResult) -> str:
    return sentence(result.to_dict())


def sentence(step: dict) -> str:
    """Why a step (a dict) took its edge."""
    taken = step["trace"][-1] if step.get("trace") else {}
    if step.get("default_taken"):
        failed = [t["criteria"] for t in step.get("trace", [])[:-1]]
        why = "default edge" + (f" (not true: {'; '.join(failed)})" if failed else "")
    else:
        why = f"{taken.get('criteria')} is true"
    line = f"{step['node_id']} -> {step['next_node_id']} by {step['edge_id']}: {why}"
    if step.get("decision"):
        d = step["decision"]
        line += f"; decision {d['action']}" + (f" ({d['reason']})" if d.get("reason") else "")
    return line


def presented(run: dict) -> dict:
    """The run as the API answers it (``RunPublic``): its path as dicts and one sentence per
    step saying why. A view already presented (a leader's answer forwarded to a follower, a
    run store record's view) is returned as it is."""
    if "explanation" in run:
        return run
    return _view(run, path_dicts(run["path"]))


def presented_encodable(run: dict) -> dict:
    """``presented(run)`` for ``orjson.dumps`` alone (the hot path's answer): the same keys in
    the same order, each recorded ``Step`` of the path as its own JSON (``Step.to_json``, made
    once and kept: apply made it for the step's row) in an ``orjson.Fragment`` instead of a
    fresh dict of every level, so that the bytes are those of ``presented(run)`` without
    building the path's dicts. Not for a reader that looks into the path."""
    if "explanation" in run:
        return run
    return _view(run, [orjson.Fragment(s.to_json()) if s.__class__ is Step else s
                       for s in run["path"]])


def _view(run: dict, path: list) -> dict:
    """The presented view of ``run`` with ``path`` as its path."""
    steps = run["path"]
    # (a leader of the former version forwarded views with ``workflow_version`` and no
    # explanation)
    version = run["version"] if "version" in run else run["workflow_version"]
    return {
        "run_id": run["run_id"], "event_id": run["event_id"], "workflow_id": run["workflow_id"],
        "workflow_version": version, "state": run["state"], "decision": run["decision"],
        "node_id": run["node_id"], "waiting_for": run["waiting_for"], "path": path,
        "metrics": run["metrics"], "scores": run["scores"], "apps": run["apps"],
        "offset": run["offset"], "started_ts": run["started_ts"],
        "updated_ts": run["updated_ts"], "explanation": explain(steps),
    }


def record_of(run: dict) -> dict[str, Any]:
    """The run as a ``RunRecord`` dict for the run store. Its path holds the steps as apply
    recorded them (``Step``: mappings equal to their dicts; ``RunRecord.to_json`` writes each
    one's own JSON), or their dicts as restored: no step dict is built here."""
    return {
        "run_id": run["run_id"], "event_id": run["event_id"], "event_type": run["event_type"],
        "workflow_id": run["workflow_id"], "workflow_version": run["version"],
        "state": run["state"], "event": run["event"], "path": list(run["path"]),
        "decision": run["decision"], "metrics": run["metrics"], "scores": run["scores"],
        "apps": run["apps"], "started_ts": run["started_ts"],
        "updated_ts": run["updated_ts"], "offset": run["offset"],
    }
