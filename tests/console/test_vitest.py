"""The console's component tests (Vitest): graph <-> model, edge order, diff and problem
mapping, undo. Needs the console's node_modules (``make console``); fails without npm."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"


def test_vitest_component_tests_pass():
    npm = shutil.which("npm")
    assert npm, "npm missing: the console needs Node 20 and npm"
    assert (CONSOLE / "node_modules").is_dir(), "run `make console` first (npm ci)"
    r = subprocess.run([npm, "test", "--silent"], cwd=CONSOLE, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " passed" in r.stdout
