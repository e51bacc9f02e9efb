"""A checkpoint store in HDFS, spoken to over the WebHDFS REST API.

Writes go in two steps as WebHDFS requires: the NameNode answers CREATE with a redirect to a
DataNode, and the file body is streamed there. HDFS shows a file while it is being written, so
``put_bytes`` writes a temporary name and renames it into place (rename2, overwriting). When
the DataNode advertises a host name this machine cannot resolve, pass ``datanode_host`` to
rewrite redirects.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from checkpoints.errors import CheckpointStoreError
from checkpoints.layout import check_relative

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0
DOWNLOAD_CHUNK_BYTES = 1024 * 1024
REDIRECTS_MAX = 1


class WebHdfsStore:
    def __init__(
        self,
        base_url: str,
        root: str,
        *,
        user: str | None = None,
        datanode_host: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = "/" + root.strip("/")
        self.user = user
        self.datanode_host = datanode_host
        self.url = f"webhdfs://{urlsplit(self.base_url).netloc}{self.root}"
        self._http = requests.Session()

    def _api(self, key: str | None) -> str:
        path = self.root if key is None else f"{self.root.rstrip('/')}/{check_relative(key)}"
        return f"{self.base_url}/webhdfs/v1{quote(path)}"

    def _params(self, op: str, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"op": op, **extra}
        if self.user:
            params["user.name"] = self.user
        return params

    def _call(self, method: str, key: str | None, op: str, **kw: Any) -> requests.Response:
        extra = kw.pop("params", {})
        resp = self._http.request(
            method,
            self._api(key),
            params=self._params(op, **extra),
            timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
            **kw,
        )
        if resp.status_code == 404:
            raise FileNotFoundError(f"{self.url}/{key or ''}: {_remote_message(resp)}")
        if resp.status_code >= 400:
            raise CheckpointStoreError(
                f"{self.url}/{key or ''}: {op} -> HTTP {resp.status_code}: {_remote_message(resp)}"
            )
        return resp

    def _datanode(self, location: str) -> str:
        if not self.datanode_host:
            return location
        parts = urlsplit(location)
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"{self.datanode_host}{port}"))

    def _create(self, key: str, body: Any) -> None:
        # Step 1 asks the NameNode where to write; step 2 streams the body to that DataNode.
        resp = self._call("PUT", key, "CREATE", params={"overwrite": "true"}, allow_redirects=False)
        if resp.status_code not in (301, 302, 303, 307, 308):
            raise CheckpointStoreError(
                f"{self.url}/{key}: CREATE gave {resp.status_code}, no redirect"
            )
        location = self._datanode(resp.headers["Location"])
        put = self._http.put(
            location,
            data=body,
            headers={"Content-Type": "application/octet-stream"},
            timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        )
        if put.status_code != 201:
            raise CheckpointStoreError(
                f"{self.url}/{key}: DataNode write -> HTTP {put.status_code}: "
                f"{_remote_message(put)}"
            )

    def put_file(self, key: str, src: Path) -> None:
        with open(src, "rb") as f:
            self._create(key, f)  # requests streams a file object, never loading it whole

    def put_bytes(self, key: str, data: bytes) -> None:
        folder, _, base = key.rpartition("/")
        tmp = f"{folder}/.{base}.tmp-{uuid.uuid4().hex[:8]}".lstrip("/")
        self._create(tmp, data)
        # RENAME with OVERWRITE (HDFS rename2) replaces an existing manifest atomically.
        try:
            resp = self._call(
                "PUT",
                tmp,
                "RENAME",
                params={
                    "destination": f"{self.root.rstrip('/')}/{key}",
                    "renameoptions": "OVERWRITE",
                },
            )
        except Exception:
            self.delete_file(tmp)
            raise
        if resp.content and resp.json().get("boolean") is False:
            self.delete_file(tmp)
            raise CheckpointStoreError(f"{self.url}/{key}: RENAME refused")

    def _open(self, key: str) -> requests.Response:
        resp = self._call("GET", key, "OPEN", allow_redirects=False, stream=True)
        if resp.is_redirect:
            resp.close()
            resp = self._http.get(
                self._datanode(resp.headers["Location"]),
                stream=True,
                timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
            )
            if resp.status_code >= 400:
                raise CheckpointStoreError(
                    f"{self.url}/{key}: DataNode read -> HTTP {resp.status_code}"
                )
        return resp

    def get_file(self, key: str, dst: Path) -> None:
        with self._open(key) as resp, open(dst, "wb") as f:
            for chunk in resp.iter_content(DOWNLOAD_CHUNK_BYTES):
                f.write(chunk)

    def get_bytes(self, key: str, size_max: int) -> bytes:
        with self._open(key) as resp:
            data = bytearray()
            for chunk in resp.iter_content(DOWNLOAD_CHUNK_BYTES):
                data += chunk
                if len(data) > size_max:
                    raise ValueError(f"{key} is over {size_max} bytes")
        return bytes(data)

    def exists(self, key: str) -> bool:
        try:
            status = self._call("GET", key, "GETFILESTATUS").json()["FileStatus"]
        except FileNotFoundError:
            return False
        return status.get("type") == "FILE"

    def list_dirs(self) -> list[str]:
        try:
            statuses = self._call("GET", None, "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
        except FileNotFoundError:
            return []
        return sorted(s["pathSuffix"] for s in statuses if s.get("type") == "DIRECTORY")

    def delete_file(self, key: str) -> None:
        try:
            self._call("DELETE", key, "DELETE", params={"recursive": "false"})
        except FileNotFoundError:
            pass

    def delete_dir(self, name: str) -> None:
        try:
            self._call("DELETE", name, "DELETE", params={"recursive": "true"})
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"WebHdfsStore({self.url})"


def _remote_message(resp: requests.Response) -> str:
    try:
        return str(resp.json()["RemoteException"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200]
