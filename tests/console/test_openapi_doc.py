"""The committed OpenAPI document the console's client is generated from must be current."""

from __future__ import annotations

from runner.api.openapi_doc import DOCUMENT, render


def test_committed_console_openapi_document_is_current():
    assert DOCUMENT.read_text() == render(), (
        "console/openapi.json is stale: run `.venv/bin/python -m runner.api.openapi_doc`")
