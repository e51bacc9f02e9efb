"""Exact sliding-window metrics over an on-disk event reservoir (the Railgun design).

Callers create an ``Engine(data_dir)``, ``define`` metrics in the metric language, then
``ingest`` each event in log order and get its metric values back. Events live in compressed
chunks on disk; aggregation state lives in RocksDB. Imports nothing else of Railflow.
"""
