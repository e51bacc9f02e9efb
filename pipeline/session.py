"""One small Spark session for the pipeline's jobs, sized for a shared 2-core machine.

Call :func:`spark_session` once per process (tests reuse it per module); it is idempotent and
returns the active session if one already runs. Under ``spark-submit`` the submitted
configuration wins: nothing here overrides a master that is already set.
"""

from __future__ import annotations

import os
import sys

driver_memory_default = "4g"
shuffle_partitions_default = 8
arrow_batch_rows_max = 10_000


def spark_session(app_name: str = "railflow-pipeline", master: str | None = None,
                  driver_memory: str = driver_memory_default,
                  shuffle_partitions: int = shuffle_partitions_default):
    """Return the process's Spark session, creating it on ``local[*]`` unless told otherwise."""
    # Workers must run the same interpreter as the driver, or they miss pyarrow and our packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is not None or "spark.master" not in _submitted_conf():
        builder = builder.master(master or "local[*]")
    spark = (
        builder.config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch_rows_max))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _submitted_conf() -> dict[str, str]:
    """The configuration spark-submit passed to this driver (empty when run directly)."""
    from pyspark import SparkConf

    return dict(SparkConf().getAll())
