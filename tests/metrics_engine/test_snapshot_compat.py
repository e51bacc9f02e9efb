"""A snapshot written by an earlier build (``fixtures/``, see ``snapshot_fixture``) restores
into this one with the digest it was written with, and the restored engine carries on with
every value equal to the brute force: what a node restarting from an old checkpoint meets."""

from __future__ import annotations

import json

from metrics_engine.engine import FORMAT_VERSION

from .snapshot_fixture import FIXTURE, check_restores_and_carries_on


def test_the_fixture_is_of_this_format():
    # A new format needs a new fixture, and the old one kept while old snapshots are read.
    assert json.loads((FIXTURE / "manifest.json").read_text())["format"] == FORMAT_VERSION


def test_an_earlier_builds_snapshot_restores_with_its_digest_and_carries_on_exactly(tmp_path):
    check_restores_and_carries_on(tmp_path)
