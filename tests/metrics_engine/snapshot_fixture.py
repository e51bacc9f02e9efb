"""The engine snapshot kept in ``fixtures/`` to check that a build still restores what an
earlier build wrote: its metric texts, its event stream and how it was written.

Rewrite the fixture only when the snapshot format changes on purpose (and then bump
``FORMAT_VERSION``): ``python -m tests.metrics_engine.snapshot_fixture``. A build that cannot
restore the old fixture with its recorded digest, or carries on with different values, breaks
every node restarting from a checkpoint written before the upgrade.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "engine-format-4"
OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8192)
T0 = 1_700_006_400_000  # a UTC midnight
EVENTS, CUT, SEED = 900, 600, 20261124

AGGS = ("COUNT(*), SUM(amount), AVG(amount), MIN(amount), MAX(amount), STDDEV(amount), "
        "SKEWNESS(amount), COUNT(DISTINCT merchant), OLDEST(amount), RECENT(merchant), "
        "RATIO(channel = 'cnp'), TIME_SINCE_LAST()")
TEXTS = [
    # Sliding windows of several lengths, one with a delay, one excluding the current event.
    f"SELECT {AGGS} FROM payments GROUP BY card RANGE 10 MINUTES",
    f"SELECT {AGGS} FROM payments GROUP BY card, channel RANGE 1 HOURS",
    "SELECT SUM(amount), COUNT(*), MAX(amount) FROM payments GROUP BY merchant "
    "RANGE 30 MINUTES DELAY 5 MINUTES",
    "SELECT TIME_SINCE_LAST(), COUNT(*) FROM payments GROUP BY card RANGE 1 DAYS "
    "EXCLUDING CURRENT",
    # Calendar windows over the same buckets (views of one table), and a filtered one.
    f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 1 HOURS EVERY 10 MINUTES",
    f"SELECT {AGGS} FROM payments GROUP BY card HOPPING 3 HOURS EVERY 10 MINUTES",
    "SELECT SUM(amount), COUNT(DISTINCT card) FROM payments WHERE amount > 0 "
    "GROUP BY merchant HOPPING 2 HOURS EVERY 30 MINUTES",
]


def stream() -> list[tuple[int, dict]]:
    """About ten hours of events; group keys that mix 1, 1.0 and true, nulls, floats and
    negative amounts, so grouping and exact sums cross the restore too."""
    rng = random.Random(SEED)
    t, out = T0, []
    for _ in range(EVENTS):
        t += rng.choice([0, 1_000, 15_000, 60_000, 90_000])
        out.append((t, {"card": rng.choice(["a", "b", "c", 1, 1.0, True]),
                        "merchant": rng.choice(["m1", "m2", "m3", None]),
                        "channel": rng.choice(["cnp", "cp"]),
                        "amount": rng.choice([rng.randrange(-50, 50_000), None, 2.5,
                                              round(rng.uniform(-1e3, 1e3), 2)])}))
    return out


def check_restores_and_carries_on(tmp_path: Path,
                                  after_restore: Callable | None = None) -> None:
    """The fixture restores into a fresh engine (``after_restore(engine)`` then looks at it)
    with the digest it was written with; fed the rest of the stream, every value equals the
    brute force and the final digest that of an engine that saw every event itself."""
    from metrics_engine.engine import Engine
    from metrics_engine.language import parse

    from .oracle import check_values

    snap = tmp_path / "snap"
    shutil.copytree(FIXTURE / "snapshot", snap)  # restore must not depend on writing into it
    eng = Engine(tmp_path / "node", **OPTS)
    eng.restore(snap)
    if after_restore is not None:
        after_restore(eng)
    assert eng.digest() == json.loads((FIXTURE / "manifest.json").read_text())["digest"]
    events = stream()
    got = [eng.ingest("payments", ev, t) for t, ev in events[CUT:]]
    check_values([d for text in TEXTS for d in parse(text)], events, got, start=CUT)
    live = Engine(tmp_path / "live", **OPTS)
    for text in TEXTS:
        live.define(text)
    for t, ev in events:
        live.ingest("payments", ev, t)
    assert eng.digest() == live.digest()
    eng.close()
    live.close()


def write(dest: Path = FIXTURE) -> None:
    from metrics_engine.engine import FORMAT_VERSION, Engine

    work = dest.parent / ".work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    eng = Engine(work, **OPTS)
    for text in TEXTS:
        eng.define(text)
    for t, ev in stream()[:CUT]:
        eng.ingest("payments", ev, t)
    eng.snapshot(dest / "snapshot")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    (dest / "manifest.json").write_text(json.dumps(
        {"format": FORMAT_VERSION, "written_by": commit, "events": CUT,
         "digest": eng.digest()}, indent=1) + "\n")
    eng.close()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    write()
    print(f"wrote {FIXTURE}")
