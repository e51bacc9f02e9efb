"""The real local cluster: ZooKeeper, Kafka, HBase + Thrift, HDFS, SeaweedFS S3, Spark jars.

``python -m infra up|down|status [--only SERVER]`` (or ``railflow cluster ...``) fetches the JVM
jars through ``infra/pom.xml`` into ``~/.cache/railflow/jars`` (Maven, once), writes configs
and data under ``~/.cache/railflow/run`` (``RAILFLOW_CACHE`` moves both), starts every server
on 127.0.0.1, waits for a real round trip through each, and stops them by their own PIDs.
Logs: ``~/.cache/railflow/run/logs/<process>.log``.

From Python: ``infra.cluster.up(names)`` returns one report per server (``kept``, ``started``
or ``failed``); stop only what you started with ``infra.cluster.down(names)``, since the
cluster is shared by every clone on the machine. Ports are in ``infra.endpoints``; a Spark
session wired to the cluster comes from ``infra.spark.session()``. Needs Java >= 17 and Maven.
"""
