"""The interpreter's policy for a process that serves a node: the cyclic garbage collector,
and how often threads hand the GIL over.

A node keeps a large live heap (workflows, compiled criteria, the metrics plans, the hot state)
and allocates a few dozen container objects per order, nearly all freed by reference counting
(apply makes no cyclic garbage at all: 12,000 W3 orders left none). With CPython's default
thresholds (700, 10, 10) the collector ran a young collection every ~15 orders and, every few
thousand orders, a full one that walked the whole heap (~0.1 s each): about 100 µs of CPU per
order in all, none of it freeing anything. So once the node started (imports, the restored
state), ``settle`` moves everything alive into the permanent generation, which no collection
walks.

What a collection walks is what is alive and not frozen, and it holds the GIL throughout: every
thread of the node stops. Apply keeps each order's rows (~36 tracked objects) in the DuckDB
buffer's generation until the flusher writes them, thousands of orders later, so a young
collection of 20,000 objects found nearly all of them alive and walked them for 5-15 ms, and a
middle one every 20 of those walked everything promoted since for tens of ms: pauses that every
order arriving meanwhile waited out (``bench/census.py`` counts them in a P1 row). So, with
``freeze_survivors`` (the default), the young threshold is small (``young_threshold``: a
collection walks ~2,000 objects, ~0.5 ms) and what survives a young collection goes straight to
the permanent generation: a later collection never walks it again, and reference counting
frees it as always when the flusher drops it. Cyclic garbage among objects that survived a
young collection is then found only by the full collection that a ``gc-full`` thread runs every
``full_every_s`` (unfreeze, collect everything, freeze again: one pause of the whole heap's
walk, tens of ms, every 15 minutes by default). A young collection still finds the cycles
born and dropped since the last one, where the few a node makes are (the HTTP layer's).
``freeze_survivors=False`` keeps the earlier policy: (20,000, 20, 100) and nothing frozen
after ``settle``.

A node's latency-bound threads (the HTTP front, the apply loop, the log's) share the GIL with
throughput-bound ones (the DuckDB flusher, the run-store writer, a checkpoint's writer); how
long one runs before another may take the GIL is ``Settings.gil_switch_ms`` (CPython's 5 ms
by default: 0.5 ms cost apply ~10-25 us more CPU per order and did not lower P1's tail).

``collections`` times every run of the cyclic collector in a serving process (a callback on
``gc.callbacks``, called only when a collection starts and ends), so ``/internal/v1/round-trip``
hands them out with the round trips they may have held up (``bench/census.py``).

Callers: the process that serves (``railflow serve``, granian's worker) calls ``for_serving()``
before building the service and ``settle()`` once it started. Tests and libraries leave the
interpreter alone.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

# Without ``freeze_survivors``: young objects between collections (default 700); young
# collections between middle ones; middle ones between full ones (which CPython runs only when
# the long-lived objects grew by a quarter since the last). Cyclic garbage is still found:
# later, not never.
thresholds = (20_000, 20, 100)
# With it: the young threshold (middle and full collections then find nothing to walk but what
# survived since the last freeze, which is nothing).
young_threshold = 2_000
full_every_s = 900.0


class CollectorClock:
    """Each run of the cyclic collector since the last ``take``: its generation, its wall time,
    the CPU time of the thread that ran it (wall beyond CPU: the thread waited for a core
    while holding the GIL) and how many objects it freed (cyclic garbage found; the rest of
    a run's work found none). At most ``kept_max`` runs; a count of the rest."""

    kept_max = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = (0.0, 0.0)
        self._runs: list[tuple[int, float, float, int]] = []
        self._dropped = 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
            return
        wall, cpu = time.perf_counter() - self._started[0], time.thread_time() - self._started[1]
        with self._lock:
            if len(self._runs) < self.kept_max:
                self._runs.append((info["generation"], wall * 1000, cpu * 1000,
                                   info.get("collected", 0)))
            else:
                self._dropped += 1

    def take(self) -> dict:
        """``{"runs": [[generation, wall ms, CPU ms, objects freed], ...], "dropped": n}``
        since the last call."""
        with self._lock:
            runs, self._runs = self._runs, []
            dropped, self._dropped = self._dropped, 0
        return {"runs": [[g, round(w, 3), round(c, 3), n] for g, w, c, n in runs],
                "dropped": dropped}


collections = CollectorClock()


class _SurvivorFreezer:
    """A ``gc.callbacks`` entry: after each young collection, freeze what survived it."""

    def __init__(self) -> None:
        self.enabled = False

    def __call__(self, phase: str, info: dict) -> None:
        if self.enabled and phase == "stop" and info["generation"] == 0:
            gc.freeze()


_freezer = _SurvivorFreezer()
_policy = {"freeze_survivors": True, "full_every_s": full_every_s}
_full_collector: threading.Thread | None = None


def for_serving(gil_switch_ms: float = 5.0, *, freeze_survivors: bool = True,
                full_every: float = full_every_s) -> None:
    _policy.update(freeze_survivors=freeze_survivors, full_every_s=full_every)
    _freezer.enabled = False  # until ``settle``, and only with ``freeze_survivors``
    if freeze_survivors:
        gc.set_threshold(young_threshold, *thresholds[1:])
    else:
        gc.set_threshold(*thresholds)
    sys.setswitchinterval(gil_switch_ms / 1000)
    for callback in (collections, _freezer):
        if callback not in gc.callbacks:
            gc.callbacks.append(callback)


def settle() -> None:
    """Collect once, then keep what is alive now out of every later collection; from now on
    (with ``freeze_survivors``) freeze each young collection's survivors too, and collect the
    whole heap every ``full_every_s``."""
    gc.collect()
    gc.freeze()
    global _full_collector
    if _policy["freeze_survivors"]:
        _freezer.enabled = True
        if _full_collector is None and _policy["full_every_s"] > 0:
            _full_collector = threading.Thread(target=_collect_fully_every,
                                               args=(_policy["full_every_s"],),
                                               name="gc-full", daemon=True)
            _full_collector.start()


def collect_fully() -> int:
    """Examine the whole heap once (the frozen part too) and freeze what is alive again: the
    cyclic garbage among frozen objects is freed here. Returns the objects freed."""
    enabled, _freezer.enabled = _freezer.enabled, False  # no freeze between the two
    gc.unfreeze()
    try:
        return gc.collect()
    finally:
        gc.freeze()
        _freezer.enabled = enabled


def _collect_fully_every(interval_s: float) -> None:
    while True:
        time.sleep(interval_s)
        collect_fully()


def leave_serving() -> None:
    """Undo ``for_serving``/``settle``'s hooks (tests; a process that serves never does)."""
    _freezer.enabled = False
    for callback in (collections, _freezer):
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
    gc.unfreeze()
