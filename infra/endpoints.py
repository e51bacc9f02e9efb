"""Where each server of the local cluster listens. Every server binds 127.0.0.1 only.

Tests, benchmarks and the runner's cluster settings import these instead of repeating ports.
"""

HOST = "127.0.0.1"

ZOOKEEPER = f"{HOST}:2181"
KAFKA_BOOTSTRAP = f"{HOST}:9092"
KAFKA_CONTROLLER_PORT = 9093
HBASE_THRIFT_HOST = HOST
HBASE_THRIFT_PORT = 9090
HDFS_NAMENODE_RPC = f"hdfs://{HOST}:8020"
WEBHDFS_URL = f"http://{HOST}:9870"
S3_ENDPOINT = f"http://{HOST}:8333"
S3_ACCESS_KEY = "railflow"
S3_SECRET_KEY = "railflow-secret"
S3_REGION = "us-east-1"

API_EMBEDDED = f"http://{HOST}:8000"
API_CLUSTER_NODES = [f"http://{HOST}:{port}" for port in (8001, 8002, 8003)]


def s3_checkpoint_url(bucket: str, prefix: str) -> str:
    """A ``checkpoints.store_from_url`` URL for ``bucket/prefix`` on the local S3 store."""
    return (f"s3://{bucket}/{prefix.strip('/')}?endpoint={S3_ENDPOINT}"
            f"&access_key={S3_ACCESS_KEY}&secret_key={S3_SECRET_KEY}&region={S3_REGION}")


def webhdfs_checkpoint_url(path: str, user: str = "railflow") -> str:
    """A ``checkpoints.store_from_url`` URL for ``path`` on the local HDFS, through WebHDFS."""
    return f"webhdfs://{WEBHDFS_URL.removeprefix('http://')}/{path.strip('/')}?user={user}"
