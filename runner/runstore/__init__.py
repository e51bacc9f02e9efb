"""The run store: every run, written once when it starts and once when it reaches a decision.

``open_run_store(settings)`` returns the configured store: HBase through happybase in cluster
mode, RocksDB through rocksdict embedded, or an in-memory store for tests. All share the
``RunStore`` protocol and one row-key design (``keys``): a hash prefix spreads run rows across
regions, and index rows give lookups by order id, card, customer and event id. Writes are idempotent
(the same run written twice is the same row), so the leader may re-drive them after failover.
"""

from runner.runstore.base import RunRecord, RunStore, open_run_store

__all__ = ["RunRecord", "RunStore", "open_run_store"]
