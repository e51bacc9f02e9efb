"""The cyclic garbage collector's policy for a process that serves a node.

A node keeps a large live heap (workflows, compiled criteria, the metrics plans, the hot state)
and allocates a few dozen container objects per order, nearly all freed by reference counting.
With CPython's default thresholds (700, 10, 10) the collector ran a young collection every ~15
orders and, every few thousand orders, a full one that walked the whole heap (~0.1 s each):
about 100 µs of CPU per order in all, none of it freeing anything. So a serving process
collects young objects far less often, and once the node started (imports, the restored
state), it moves everything alive into the permanent generation, which no collection walks.

Callers: the process that serves (``railflow serve``, granian's worker) calls ``for_serving()``
before building the service and ``settle()`` once it started. Tests and libraries leave the
collector alone.
"""

from __future__ import annotations

import gc

# Young objects between collections (default 700); young collections between middle ones;
# middle ones between full ones (which CPython runs only when the long-lived objects grew by
# a quarter since the last). Cyclic garbage is still found: later, not never.
thresholds = (20_000, 20, 100)


def for_serving() -> None:
    gc.set_threshold(*thresholds)


def settle() -> None:
    """Collect once, then keep what is alive now out of every later collection."""
    gc.collect()
    gc.freeze()
