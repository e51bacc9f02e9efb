"""The real local cluster: ZooKeeper, Kafka, HBase + Thrift, HDFS, SeaweedFS S3, Spark jars.

``python -m infra up|down|status`` fetches the JVM jars through ``infra/pom.xml`` into a cache
outside the repository, starts every server on 127.0.0.1, waits for a real round trip through
each, and stops them by their own PIDs. Logs go to one folder.
"""
