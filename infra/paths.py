"""Where the cluster keeps its jars, configs, data, logs and PID files: all outside the repo.

``RAILFLOW_CACHE`` overrides the root (default ``~/.cache/railflow``). Every clone on the
machine shares one cluster, so the runtime directory is per user, not per checkout.
"""

import os
from pathlib import Path

CACHE_DIR = Path(os.environ.get("RAILFLOW_CACHE", Path.home() / ".cache" / "railflow"))
JARS_DIR = CACHE_DIR / "jars"
RUN_DIR = CACHE_DIR / "run"
LOG_DIR = RUN_DIR / "logs"
PID_DIR = RUN_DIR / "pids"
CONF_DIR = RUN_DIR / "conf"
DATA_DIR = RUN_DIR / "data"
LOCK_FILE = RUN_DIR / "cluster.lock"


def ensure_dirs() -> None:
    """Create the runtime folders (idempotent)."""
    for d in (JARS_DIR, LOG_DIR, PID_DIR, CONF_DIR, DATA_DIR):
        d.mkdir(parents=True, exist_ok=True)


def log_file(process: str) -> Path:
    return LOG_DIR / f"{process}.log"


def conf_dir(server: str) -> Path:
    d = CONF_DIR / server
    d.mkdir(parents=True, exist_ok=True)
    return d


def data_dir(server: str) -> Path:
    d = DATA_DIR / server
    d.mkdir(parents=True, exist_ok=True)
    return d
