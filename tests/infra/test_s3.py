"""S3 round trips through boto3 against SeaweedFS: put, get, list, multipart upload."""

import os
import uuid

import pytest

from infra.seaweedfs import s3_client

pytestmark = pytest.mark.cluster
PART_BYTES = 5 * 1024 * 1024  # S3's minimum size for all parts but the last


@pytest.fixture
def bucket():
    s3 = s3_client()
    name = f"railflow-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield s3, name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


def test_put_get_list(bucket):
    s3, name = bucket
    for i in range(3):
        s3.put_object(Bucket=name, Key=f"ckpt/{i}/manifest.json", Body=f"m{i}".encode())
    s3.put_object(Bucket=name, Key="other/x", Body=b"x")
    assert s3.get_object(Bucket=name, Key="ckpt/1/manifest.json")["Body"].read() == b"m1"
    listed = s3.list_objects_v2(Bucket=name, Prefix="ckpt/")
    assert [o["Key"] for o in listed["Contents"]] == [f"ckpt/{i}/manifest.json" for i in range(3)]


def test_multipart_upload(bucket):
    s3, name = bucket
    parts_data = [os.urandom(PART_BYTES), os.urandom(PART_BYTES), os.urandom(1234)]
    upload = s3.create_multipart_upload(Bucket=name, Key="big.bin")
    parts = []
    for number, data in enumerate(parts_data, start=1):
        r = s3.upload_part(Bucket=name, Key="big.bin", UploadId=upload["UploadId"],
                           PartNumber=number, Body=data)
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket=name, Key="big.bin", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": parts})
    got = s3.get_object(Bucket=name, Key="big.bin")["Body"].read()
    assert got == b"".join(parts_data)
