"""HDFS round trips through WebHDFS (fsspec's client): write, list, read back, delete."""

import os
import uuid

import fsspec
import pytest

from infra.endpoints import WEBHDFS_URL

pytestmark = pytest.mark.cluster


@pytest.fixture
def fs():
    host, port = WEBHDFS_URL.removeprefix("http://").split(":")
    return fsspec.filesystem("webhdfs", host=host, port=int(port), user="railflow")


def test_write_list_read_delete(fs):
    base = f"/railflow-tests/smoke-{uuid.uuid4().hex[:12]}"
    payload = os.urandom(3 * 1024 * 1024 + 17)  # spans more than one write buffer
    with fs.open(f"{base}/blob.bin", "wb") as f:
        f.write(payload)
    assert fs.ls(base, detail=False) == [f"{base}/blob.bin"]
    assert fs.info(f"{base}/blob.bin")["size"] == len(payload)
    with fs.open(f"{base}/blob.bin", "rb") as f:
        assert f.read() == payload
    fs.rm(base, recursive=True)
    assert not fs.exists(base)
