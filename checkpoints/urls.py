"""Build a checkpoint store from a URL, so configuration is one string.

- ``file:///var/lib/railflow/checkpoints`` (or a bare path): a local directory;
- ``s3://bucket/prefix?endpoint=http://127.0.0.1:8333&region=us-east-1&access_key=..&secret_key=..``
  (without keys, boto3's usual environment and config files apply);
- ``webhdfs://namenode:9870/path?user=railflow&datanode_host=127.0.0.1``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from checkpoints.stores import CheckpointStore
from checkpoints.stores.local import LocalStore
from checkpoints.stores.s3 import S3Store
from checkpoints.stores.webhdfs import WebHdfsStore


def store_from_url(url: str) -> CheckpointStore:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme in ("", "file"):
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URLs name a local path, got host {parts.netloc!r}")
        return LocalStore(Path(unquote(parts.path)))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"s3 URL without a bucket: {url!r}")
        return S3Store(
            parts.netloc,
            unquote(parts.path),
            endpoint_url=query.get("endpoint"),
            region=query.get("region"),
            access_key=query.get("access_key"),
            secret_key=query.get("secret_key"),
            create_bucket=query.get("create_bucket", "true").lower() != "false",
        )
    if parts.scheme in ("webhdfs", "webhdfs+http", "swebhdfs", "webhdfs+https"):
        secure = parts.scheme in ("swebhdfs", "webhdfs+https")
        return WebHdfsStore(
            f"{'https' if secure else 'http'}://{parts.netloc}",
            unquote(parts.path) or "/",
            user=query.get("user"),
            datanode_host=query.get("datanode_host"),
        )
    raise ValueError(f"unknown checkpoint store scheme {parts.scheme!r} in {url!r}")
