"""``railflow pipeline ...`` is mounted on the main CLI and its jobs write what they promise."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from runner.cli import app


def test_backtest_command_writes_outcomes_and_summary(spark, tmp_path):
    history = tmp_path / "history.parquet"
    pq.write_table(pa.table({
        "seq": [0, 1, 2], "event_id": ["a", "b", "c"], "ts": [1, 2, 3],
        "country": ["US", "DE", "US"], "amount": [100, 200, 300],
        "score_payment_abuse": [95.0, 85.0, 10.0],
    }), history)
    out = tmp_path / "bt"
    result = CliRunner().invoke(app, ["pipeline", "backtest", "--history", str(history),
                                      "--workflow", "sift_example", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 3
    assert summary["by_action"] == {"decided:approve": 1, "decided:block": 2}
    decisions = {r["event_id"]: r["action"] for r in
                 pq.read_table(out / "outcomes").select(["event_id", "action"]).to_pylist()}
    assert decisions == {"a": "block", "b": "block", "c": "approve"}


def test_serve_path_does_not_import_spark():
    import subprocess
    import sys

    code = "import sys, runner.cli; print('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
