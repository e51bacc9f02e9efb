"""Schemathesis over the Sift-compatible routes of an embedded node: no 5xx, JSON always."""

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
    settings = Settings(data_dir=tmp_path_factory.mktemp("sift-schema"), port=port,
                        request_deadline_ms_default=1000)
    service = Service(settings)
    key = service.auth.create_key("sift-schema")
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
    yield {"url": url, "key": key}
    server.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def openapi(embedded):
    return schemathesis.openapi.from_url(embedded["url"] + "/openapi.json")


schema = schemathesis.pytest.from_fixture("openapi").include(tag="sift")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error(case, embedded):
    # Half the events carry the right key, so generation reaches past authentication.
    if isinstance(case.body, dict) and case.body.get("$user_id", "") != "":
        case.body["$api_key"] = embedded["key"]
    response = case.call(base_url=embedded["url"], auth=(embedded["key"], ""), timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.text[:300])
    body = response.json()  # always JSON
    if response.status_code == 405:  # a method the path lacks: the router's own JSON
        assert body["detail"]
    elif response.status_code >= 400:
        assert body.get("status", 0) != 0 and body["error_message"], (response.status_code, body)
    elif case.path.endswith("/events"):
        assert body["status"] == 0
