"""Batch jobs: synthetic data, point-in-time metrics over history, backfills and backtests.

``pipeline.synthetic`` runs without Spark; the Spark jobs need the ``spark`` extra and reuse
``metrics_engine`` and ``workflows`` so offline values equal the online ones exactly.
"""
