"""Exact sliding-window metrics over an on-disk event reservoir (the Railgun design).

Callers create an ``Engine(data_dir)``, ``define`` metrics in the metric language, then
``ingest`` each event in log order and get its metric values back. Events live in compressed
chunks on disk; the hot path (window cursors, keyed aggregation states, finalizers) runs in the
native core ``railflow_metrics_native`` (the Rust crate in ``metrics_engine/native/``, built by
``make venv``). Imports nothing else of Railflow.

What the caller must do:
- call the engine from one thread, in log order; a ``ts`` older than the stream's last one is
  clamped to it (time never goes back);
- pass JSON-like events (str, int, float, bool, None, lists, dicts); fields used as group keys
  or aggregated values must hold scalars, else ``ingest`` raises ``MetricInputError`` naming the
  field before anything changes; money is an int in minor units (sums stay exact ints);
- group keys and distinct values compare by value: ``1`` and ``1.0`` are one key, ``true`` is
  another (booleans are not numbers), in memory, in snapshots and after a restore;
- a float NaN or infinity is null to every metric, key and predicate (the reservoir stores it
  as null, and an event must count the same live and read back); aggregations skip nulls
  (``COUNT(*)`` and ``RATIO`` count every event);
- after a crash, reopen the same ``data_dir`` and re-feed each stream from
  ``durable_positions()[stream]``; for replicas, use ``snapshot``/``restore`` and replay.

A metric defined while the engine runs is filled from the events the reservoir still holds
for its stream (everything back to the oldest position any window of that stream needs); a
window longer than that is exact once it has been running for its length. Events of a stream
with no metric are not stored.

Modules: ``language`` (parser), ``predicates`` (WHERE / RATIO), ``reservoir`` (chunks and
segments), ``plan`` (the DAG, lowered into the native core), ``engine`` (the API), ``offline``
(the same code for batch jobs); ``native/`` (the Rust crate: aggregations, keyed state, cursors).
"""

from metrics_engine.engine import Engine, MetricInfo
from metrics_engine.errors import (
    InvariantViolation,
    MetricInputError,
    MetricOutputError,
    MetricSyntaxError,
)

__all__ = ["Engine", "MetricInfo", "MetricSyntaxError", "MetricInputError", "MetricOutputError",
           "InvariantViolation"]
