"""Schemathesis over the OpenAPI document of an embedded node served by uvicorn: no 5xx."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings

from runner.api.app import create_app
from runner.service import Service
from runner.settings import Settings

ready_timeout_s = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    port = _free_port()
    settings = Settings(data_dir=tmp_path_factory.mktemp("schema"), port=port)
    service = Service(settings)
    key = service.auth.create_key("schema")
    service.auth.create_user("admin", "pw", "admin")
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz").json()["status"] == "ok":
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    token = httpx.post(url + "/v1/auth/token",
                       json={"username": "admin", "password": "pw"}).json()["access_token"]
    yield {"url": url, "key": key, "token": token}
    server.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def openapi(embedded):
    return schemathesis.openapi.from_url(embedded["url"] + "/openapi.json")


schema = schemathesis.pytest.from_fixture("openapi")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error(case, embedded):
    bearer = embedded["key"] if case.path.startswith(("/v1/events", "/v1/runs")) \
        else embedded["token"]
    response = case.call(base_url=embedded["url"], headers={"Authorization": f"Bearer {bearer}"},
                         timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.text[:300])
