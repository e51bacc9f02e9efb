"""Spark through pyspark in local mode, with the Kafka source and S3A from the jar cache.

``session()`` returns a SparkSession whose ``spark.jars`` are the ``spark`` profile of
``infra/pom.xml`` (resolved once into ``~/.cache/railflow/jars/spark``), minus jars pyspark
already bundles, so nothing is downloaded at run time. S3A points at the local SeaweedFS with
path-style access; Kafka is reached at ``infra.endpoints.KAFKA_BOOTSTRAP``. The caller must
``stop()`` the session it gets.
"""

import re
from pathlib import Path

from infra import jars
from infra.endpoints import S3_ACCESS_KEY, S3_ENDPOINT, S3_SECRET_KEY

DRIVER_MEMORY = "1g"
SHUFFLE_PARTITIONS = 4
_VERSION_SUFFIX = re.compile(r"-\d+(\.\d+)+[^/]*\.jar$")


def _artifact(jar_name: str) -> str:
    return _VERSION_SUFFIX.sub("", jar_name)


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def extra_jars() -> list[Path]:
    """The connector jars Spark needs beyond the pyspark wheel (no duplicates of its own)."""
    bundled = {_artifact(j.name) for j in pyspark_jars_dir().glob("*.jar")}
    return [j for j in jars.jar_files("spark") if _artifact(j.name) not in bundled]


def s3a_conf() -> dict[str, str]:
    return {
        "spark.hadoop.fs.s3a.endpoint": S3_ENDPOINT,
        "spark.hadoop.fs.s3a.access.key": S3_ACCESS_KEY,
        "spark.hadoop.fs.s3a.secret.key": S3_SECRET_KEY,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
        "spark.hadoop.fs.s3a.connection.timeout": "10s",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",
    }


# Short jobs (tests, smoke checks) spend most of their time starting the JVM; C1-only JIT and a
# serial GC roughly halve that on a loaded 2-core machine. Long jobs should keep the defaults.
QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"


def session_conf(master: str = "local[2]", quick_start: bool = False) -> dict[str, str]:
    extra = {"spark.driver.extraJavaOptions": QUICK_START_JAVA_OPTIONS} if quick_start else {}
    return {
        "spark.master": master,
        "spark.jars": ",".join(str(j) for j in extra_jars()),
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        **s3a_conf(),
        **extra,
    }


def session(app_name: str = "railflow", master: str = "local[2]", quick_start: bool = False):
    """A new local SparkSession wired to the local cluster."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for k, v in session_conf(master, quick_start).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
