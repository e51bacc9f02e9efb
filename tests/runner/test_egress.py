"""Outside calls: webhook and app URLs only under the configured prefixes, webhook secrets only
by a configured name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runner.egress import url_allowed, workflow_problems
from runner.settings import Settings

ALLOWED = ["https://hooks.example.com/rf", "http://127.0.0.1:9000"]


@pytest.mark.parametrize("url", ["https://hooks.example.com/rf", "https://hooks.example.com/rf/x",
                                 "https://HOOKS.example.com:443/rf/a?b=1",
                                 "http://127.0.0.1:9000/any"])
def test_urls_under_a_prefix_are_allowed(url):
    assert url_allowed(url, ALLOWED)


@pytest.mark.parametrize("url", ["https://hooks.example.com.evil.net/rf",
                                 "https://hooks.example.com/rfx", "http://hooks.example.com/rf",
                                 "https://user@hooks.example.com/rf", "http://127.0.0.1:9001/",
                                 "http://169.254.169.254/latest", "file:///etc/passwd",
                                 "https://hooks.example.com:8443/rf", "not a url"])
def test_other_urls_are_refused(url):
    assert not url_allowed(url, ALLOWED)


def test_nothing_is_allowed_without_configuration():
    assert not url_allowed("https://hooks.example.com/rf", [])


def _workflow(url: str, ref: str) -> dict:
    return {"nodes": [{"id": "start", "kind": "score"},
                      {"id": "notify", "kind": "webhook", "url": url, "secret_ref": ref}]}


def test_a_workflow_names_its_bad_webhook_field():
    assert workflow_problems(_workflow("https://hooks.example.com/rf/a", "hook"), ALLOWED,
                             {"hook"}) == []
    (problem,) = workflow_problems(_workflow("http://10.0.0.1/", "hook"), ALLOWED, {"hook"})
    assert problem[0] == "nodes.notify.url"
    (problem,) = workflow_problems(_workflow("https://hooks.example.com/rf", "nope"), ALLOWED,
                                   {"hook"})
    assert problem[0] == "nodes.notify.secret_ref"


def test_app_urls_outside_the_allow_list_refuse_to_start():
    with pytest.raises(ValidationError, match="RAILFLOW_APP_URLS"):
        Settings(app_urls={"fraud": "http://10.1.2.3/score"})
    ok = Settings(app_urls={"fraud": "http://127.0.0.1:9000/score"}, allowed_url_prefixes=ALLOWED)
    assert ok.app_urls["fraud"]
