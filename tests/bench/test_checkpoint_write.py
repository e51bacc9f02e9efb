"""bench/checkpoint_write.py: a short run writes both dumps through the real checkpointer and
reports each one's CPU and bytes; the zstd dump is the smaller."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_run_reports_both_dumps():
    subprocess.run([sys.executable, "bench/checkpoint_write.py", "--orders", "1500",
                    "--rounds", "1", "--gap", "50"], cwd=ROOT, capture_output=True, text=True,
                   check=True, timeout=300)
    doc = json.loads((ROOT / "bench" / "results" / "checkpoint_write.json").read_text())
    rows = {r["dump"]: r for r in doc["results"]}
    assert rows.keys() == {"old", "new"}
    assert all(r["writes"] == 2 and r["runs_held"] >= 1500 and r["cpu_ms_p50"] > 0
               for r in rows.values())
    assert rows["new"]["mb_p50"] < rows["old"]["mb_p50"]
    assert doc["targets"]["p1_checkpoint_core_share"]["unit"] == "core"
