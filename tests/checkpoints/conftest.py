"""Stores for the checkpoint tests: the same test bodies run on a local directory (no cluster)
and on the real S3 (SeaweedFS) and HDFS (WebHDFS) of infra/ (marked ``cluster``). Each test
gets its own bucket prefix / HDFS folder so reruns never see each other's checkpoints."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from checkpoints import store_from_url
from checkpoints.stores import CheckpointStore
from infra import endpoints

S3_BUCKET = "railflow-checkpoint-tests"
HDFS_ROOT = "/railflow-tests/checkpoints"


def _url(kind: str, tmp_path: Path) -> str:
    run = uuid.uuid4().hex[:12]
    if kind == "local":
        return (tmp_path / "store").as_uri()
    if kind == "s3":
        return endpoints.s3_checkpoint_url(S3_BUCKET, run)
    return endpoints.webhdfs_checkpoint_url(f"{HDFS_ROOT}/{run}")


@pytest.fixture(
    params=[
        "local",
        pytest.param("s3", marks=pytest.mark.cluster),
        pytest.param("hdfs", marks=pytest.mark.cluster),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStore:
    s = store_from_url(_url(request.param, tmp_path))
    yield s
    if request.param != "local":
        for name in s.list_dirs():
            s.delete_dir(name)
