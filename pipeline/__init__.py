"""Batch jobs: synthetic data, point-in-time metrics over history, backfills and backtests.

- :mod:`pipeline.synthetic` generates the deterministic data sets without Spark;
  :mod:`pipeline.synthetic_job` builds them as a Spark job, one task per day block.
- :mod:`pipeline.features` gives every event the value of each metric exactly as the online
  engine gave it, by running ``metrics_engine.offline.compute`` over each group-key partition
  in (ts, seq) order (:mod:`pipeline.partitioned`, :mod:`pipeline.ordering`);
  :mod:`pipeline.parity` checks it against ``Engine.ingest``.
- :mod:`pipeline.backfill` writes the engine snapshot that serves a new metric exactly from now.
- :mod:`pipeline.backtest` walks a workflow version (and a base version) over history with
  ``workflows.advance``; runs needing an answer history lacks are reported, never guessed.
- :mod:`pipeline.jobs`, :mod:`pipeline.cli` (``railflow pipeline ...``) and
  :mod:`pipeline.submit` (``spark-submit``) run them end to end.

Callers need the ``spark`` extra and Java 17; :func:`pipeline.session.spark_session` starts a
small ``local[*]`` session unless spark-submit chose a master. Events must carry ``ts`` (epoch
ms) and ``seq`` (log position) or come straight from Parquet in log order.
"""
