"""A snapshot written by an earlier build (``fixtures/``, see ``snapshot_fixture``) restores
into this one with the digest it was written with, and the restored engine carries on with
every value equal to the brute force: what a node restarting from an old checkpoint meets."""

from __future__ import annotations

import json
import shutil

from metrics_engine.engine import FORMAT_VERSION, Engine
from metrics_engine.language import parse

from .oracle import check_values
from .snapshot_fixture import CUT, FIXTURE, OPTS, TEXTS, stream


def _manifest() -> dict:
    return json.loads((FIXTURE / "manifest.json").read_text())


def test_the_fixture_is_of_this_format():
    # A new format needs a new fixture, and the old one kept while old snapshots are read.
    assert _manifest()["format"] == FORMAT_VERSION


def test_an_earlier_builds_snapshot_restores_with_its_digest_and_carries_on_exactly(tmp_path):
    snap = tmp_path / "snap"
    shutil.copytree(FIXTURE / "snapshot", snap)  # restore must not depend on writing into it
    eng = Engine(tmp_path / "node", **OPTS)
    eng.restore(snap)
    assert eng.digest() == _manifest()["digest"]
    events = stream()
    got = [eng.ingest("payments", ev, t) for t, ev in events[CUT:]]
    defs = [d for text in TEXTS for d in parse(text)]
    check_values(defs, events, got, start=CUT)
    # The same state as an engine that saw every event itself.
    live = Engine(tmp_path / "live", **OPTS)
    for text in TEXTS:
        live.define(text)
    for t, ev in events:
        live.ingest("payments", ev, t)
    assert eng.digest() == live.digest()
    eng.close()
    live.close()
