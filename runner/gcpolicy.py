"""The interpreter's policy for a process that serves a node: the cyclic garbage collector,
and how often threads hand the GIL over.

A node keeps a large live heap (workflows, compiled criteria, the metrics plans, the hot state)
and allocates a few dozen container objects per order, nearly all freed by reference counting.
With CPython's default thresholds (700, 10, 10) the collector ran a young collection every ~15
orders and, every few thousand orders, a full one that walked the whole heap (~0.1 s each):
about 100 µs of CPU per order in all, none of it freeing anything. So a serving process
collects young objects far less often, and once the node started (imports, the restored
state), it moves everything alive into the permanent generation, which no collection walks.

A node's latency-bound threads (the HTTP front, the apply loop, the log's) share the GIL with
throughput-bound ones (the DuckDB flusher, the run-store writer, a checkpoint's writer); how
long one runs before another may take the GIL is ``Settings.gil_switch_ms`` (CPython's 5 ms
by default: 0.5 ms cost apply ~10-25 us more CPU per order and did not lower P1's tail).

Callers: the process that serves (``railflow serve``, granian's worker) calls ``for_serving()``
before building the service and ``settle()`` once it started. Tests and libraries leave the
interpreter alone.
"""

from __future__ import annotations

import gc
import sys

# Young objects between collections (default 700); young collections between middle ones;
# middle ones between full ones (which CPython runs only when the long-lived objects grew by
# a quarter since the last). Cyclic garbage is still found: later, not never.
thresholds = (20_000, 20, 100)


def for_serving(gil_switch_ms: float = 5.0) -> None:
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(gil_switch_ms / 1000)


def settle() -> None:
    """Collect once, then keep what is alive now out of every later collection."""
    gc.collect()
    gc.freeze()
