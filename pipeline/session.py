"""One Spark session for the pipeline's jobs, sized for this machine (2 cores, 24 GiB).

Call :func:`spark_session` once per process (tests reuse it per module); it is idempotent and
returns the active session if one already runs. Under ``spark-submit`` the submitted
configuration wins: nothing here overrides a master that is already set.

Memory (:func:`memory_plan`): in local mode the driver JVM is also the executor, and the
engines run in one Python worker per core beside it. The JVM gets a third of the machine
(shuffle, sort with spill to disk, Arrow buffers), each Python worker a share of the rest
(its engine's memory-only reservoir holds up to ``features.events_per_partition_max`` events),
and a quarter stays for the page cache and the OS. ``RAILFLOW_SPARK_MEMORY_GIB`` overrides the
machine size the plan assumes.
"""

from __future__ import annotations

import os
import sys

machine_memory_gib_default = 24
shuffle_partitions_default = 8
arrow_batch_rows_max = 10_000


def memory_plan(total_gib: int | None = None) -> dict[str, str]:
    """Spark memory settings for a machine of ``total_gib`` (default 24 GiB, 2 cores)."""
    total = total_gib or int(os.environ.get("RAILFLOW_SPARK_MEMORY_GIB",
                                            machine_memory_gib_default))
    jvm = max(1, total // 3)
    return {
        "spark.driver.memory": f"{jvm}g",
        # Off-heap Arrow buffers and the shuffle's netty pools come on top of the heap.
        "spark.driver.memoryOverhead": f"{max(1, jvm // 4)}g",
        "spark.memory.fraction": "0.6",
        # Results come back as files, never as one huge collect().
        "spark.driver.maxResultSize": "2g",
    }


driver_memory_default = memory_plan()["spark.driver.memory"]


def spark_session(app_name: str = "railflow-pipeline", master: str | None = None,
                  driver_memory: str = driver_memory_default,
                  shuffle_partitions: int = shuffle_partitions_default,
                  conf: dict[str, str] | None = None):
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
    for k, v in {**memory_plan(), **(conf or {})}.items():
        builder = builder.config(k, v)
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
