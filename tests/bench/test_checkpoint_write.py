"""bench/checkpoint_write.py: a short run writes checkpoints through the real checkpointer and
reports each kind's CPU and bytes: full against delta at two state sizes (the delta the
smaller), and the old dump against the new (the zstd one the smaller). bench/checkpoint_restore.py
(its arguments shared, bench/checkpoint_common.py): the same state restored from a full
checkpoint and from a chain, each row with its CPU, bytes read and ratio to the full one."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, bench: str = "checkpoint_write") -> dict:
    subprocess.run([sys.executable, f"bench/{bench}.py", *args], cwd=ROOT,
                   capture_output=True, text=True, check=True, timeout=300)
    return json.loads((ROOT / "bench" / "results" / f"{bench}.json").read_text())


def test_a_short_run_reports_full_and_delta_writes_at_two_sizes():
    doc = _run("--orders", "1500", "--orders2", "3000", "--gap", "300")
    rows = {(r["size"], r["write"]): r for r in doc["results"]}
    assert rows.keys() == {(1500, "full"), (1500, "delta"), (3000, "full"), (3000, "delta")}
    assert all(r["writes"] == 2 and r["runs_held"] >= r_size and r["cpu_ms_p50"] > 0
               for (r_size, _), r in rows.items())
    assert rows[3000, "delta"]["mb_p50"] < rows[3000, "full"]["mb_p50"]
    assert doc["targets"]["p1_checkpoint_core_share"]["unit"] == "core"


def test_a_short_run_reports_both_dumps():
    doc = _run("--ab", "dump", "--orders", "1500", "--gap", "300")
    rows = {r["write"]: r for r in doc["results"]}
    assert rows.keys() == {"old", "new"}
    assert all(r["writes"] == 2 and r["runs_held"] >= 1500 for r in rows.values())
    assert rows["new"]["mb_p50"] < rows["old"]["mb_p50"]


def test_a_short_run_restores_the_same_state_from_a_full_checkpoint_and_from_a_chain():
    doc = _run("--orders", "1500", "--gap", "200", "--deltas", "4", bench="checkpoint_restore")
    rows = {r["restore"]: r for r in doc["results"]}
    assert rows.keys() == {"full", "chain"}
    assert rows["full"]["links"] == 1 and rows["chain"]["links"] == 5  # the full one + 4
    assert all(r["restores"] == 2 and r["runs_held"] >= 1500 and r["cpu_ms_p50"] > 0
               for r in rows.values())
    assert rows["full"]["cpu_vs_full"] == rows["full"]["read_vs_full"] == 1
    # every link's parts are read: a full one's and four deltas', each with the engine whole
    assert rows["chain"]["mb_read_p50"] > rows["full"]["mb_read_p50"]
    assert rows["chain"]["read_vs_full"] > 1
