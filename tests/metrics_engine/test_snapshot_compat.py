"""A snapshot written by an earlier build (``fixtures/``, see ``snapshot_fixture``) restores
into this one with the digest it was written with, and the restored engine carries on with
every value equal to the brute force: what a node restarting from an old checkpoint meets."""

from __future__ import annotations

import json

from metrics_engine.engine import FORMATS_READ

from .snapshot_fixture import FIXTURE, check_restores_and_carries_on


def test_the_fixture_is_of_a_format_this_engine_reads():
    # A new format of the state files needs a new fixture, and the old one kept while old
    # snapshots are read. Format 5 differs from 4 only by the chunks that may be frames
    # (test_chunk_frames, test_format_version), so format 4's fixture covers both.
    assert json.loads((FIXTURE / "manifest.json").read_text())["format"] in FORMATS_READ


def test_an_earlier_builds_snapshot_restores_with_its_digest_and_carries_on_exactly(tmp_path):
    check_restores_and_carries_on(tmp_path)
