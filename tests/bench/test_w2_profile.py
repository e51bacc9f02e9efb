"""bench/w2_profile.py: the perf handshake around the timed ingest
(``bench.harness.perf_control``, shared with w1_profile.py), and a short run."""

import subprocess
import sys
from pathlib import Path

from bench.harness import perf_control

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_perf_control_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("PERF_CTL", raising=False)
    monkeypatch.delenv("PERF_ACK", raising=False)
    perf_control("enable")  # would block on a missing acknowledgement if it wrote
    assert list(tmp_path.iterdir()) == []


def test_the_command_goes_to_perf_and_its_acknowledgement_is_awaited(tmp_path, monkeypatch):
    ctl, ack = tmp_path / "ctl", tmp_path / "ack"
    ack.write_text("ack\n")
    monkeypatch.setenv("PERF_CTL", str(ctl))
    monkeypatch.setenv("PERF_ACK", str(ack))
    perf_control("disable")
    assert ctl.read_text() == "disable\n"


def test_a_short_run_prints_cpu_per_event():
    out = subprocess.run([sys.executable, "bench/w2_profile.py", "lists", "--repeats", "1",
                          "--events", "20"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert out.startswith("lists: 20 events x 1 repeats, CPU us/event min ")
