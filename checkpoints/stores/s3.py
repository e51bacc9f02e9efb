"""A checkpoint store in an S3 bucket (SeaweedFS locally, any S3 endpoint in production).

Parts go up through boto3's managed transfer (multipart above ``MULTIPART_THRESHOLD_BYTES``,
several parts in flight); a single PUT is atomic in S3, which is what the manifest needs. The
bucket is created on first write when it does not exist yet.
"""

from __future__ import annotations

import threading
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from checkpoints.errors import CheckpointStoreError
from checkpoints.layout import check_relative

MULTIPART_THRESHOLD_BYTES = 16 * 1024 * 1024
MULTIPART_CHUNK_BYTES = 16 * 1024 * 1024
TRANSFER_THREADS_MAX = 4
DELETE_BATCH_KEYS_MAX = 1000  # the S3 DeleteObjects limit
LIST_PAGES_MAX = 10_000
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


class S3Store:
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        create_bucket: bool = True,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        endpoint = f"?endpoint={endpoint_url}" if endpoint_url else ""
        self.url = f"s3://{bucket}/{self.prefix}{endpoint}"
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region or "us-east-1",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
                max_pool_connections=TRANSFER_THREADS_MAX * 2,
            ),
        )
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD_BYTES,
            multipart_chunksize=MULTIPART_CHUNK_BYTES,
            max_concurrency=TRANSFER_THREADS_MAX,
        )
        self._create_bucket = create_bucket
        self._bucket_ready = False
        self._lock = threading.Lock()

    def _key(self, key: str) -> str:
        key = check_relative(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _ensure_bucket(self) -> None:
        if self._bucket_ready or not self._create_bucket:
            return
        with self._lock:
            if self._bucket_ready:
                return
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if _code(exc) not in _NOT_FOUND:
                    raise CheckpointStoreError(f"{self.url}: head_bucket: {exc}") from exc
                try:
                    self._client.create_bucket(Bucket=self.bucket)
                except ClientError as exc2:
                    if _code(exc2) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                        raise
            self._bucket_ready = True

    def put_file(self, key: str, src: Path) -> None:
        self._ensure_bucket()
        self._client.upload_file(str(src), self.bucket, self._key(key), Config=self._transfer)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._ensure_bucket()
        self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_file(self, key: str, dst: Path) -> None:
        try:
            self._client.download_file(self.bucket, self._key(key), str(dst), Config=self._transfer)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                raise FileNotFoundError(f"{self.url}/{key}") from None
            raise

    def get_bytes(self, key: str, size_max: int) -> bytes:
        try:
            obj = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                raise FileNotFoundError(f"{self.url}/{key}") from None
            raise
        if obj["ContentLength"] > size_max:
            obj["Body"].close()
            raise ValueError(f"{key} is {obj['ContentLength']} bytes, over {size_max}")
        return obj["Body"].read()

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return False
            raise

    def list_dirs(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        names: list[str] = []
        try:
            for page in self._pages(Prefix=base, Delimiter="/"):
                for cp in page.get("CommonPrefixes", []):
                    names.append(cp["Prefix"][len(base) :].rstrip("/"))
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return []
            raise
        return sorted(names)

    def delete_file(self, key: str) -> None:
        self._client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def delete_dir(self, name: str) -> None:
        base = self._key(name).rstrip("/") + "/"
        batch: list[dict[str, str]] = []
        folders = {base}
        for page in self._pages(Prefix=base):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                batch.append({"Key": key})
                folders.update(
                    key[: i + 1] for i, c in enumerate(key) if c == "/" and i >= len(base)
                )
                if len(batch) == DELETE_BATCH_KEYS_MAX:
                    self._delete_batch(batch)
                    batch = []
        if batch:
            self._delete_batch(batch)
        # Stores backed by a real file tree (SeaweedFS) keep empty folders and list them as
        # common prefixes; deleting the "folder/" key removes them (a no-op on AWS S3).
        for folder in sorted(folders, key=len, reverse=True):
            self._client.delete_object(Bucket=self.bucket, Key=folder)

    def _delete_batch(self, batch: list[dict[str, str]]) -> None:
        resp = self._client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
        )
        if resp.get("Errors"):
            raise CheckpointStoreError(f"{self.url}: delete failed: {resp['Errors'][:3]}")

    def _pages(self, **kwargs: str):  # type: ignore[no-untyped-def]
        paginator = self._client.get_paginator("list_objects_v2")
        for n, page in enumerate(paginator.paginate(Bucket=self.bucket, **kwargs)):
            if n >= LIST_PAGES_MAX:
                raise CheckpointStoreError(f"{self.url}: listing over {LIST_PAGES_MAX} pages")
            yield page

    def __repr__(self) -> str:
        return f"S3Store({self.url})"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
