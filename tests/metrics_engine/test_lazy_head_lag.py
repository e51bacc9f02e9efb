"""Lazy heads that move in runs (native plan.rs `lazy_head_lag`) give what heads moving at
every event give.

The heads all of whose windows are lazy fall behind by up to `lazy_head_lag` events; a raw
key's read tells what its windows let go of from the logged times, an event of an eager key
and every call other than an ingest move them first. Over the lazy-eviction stream (a hot
card that turns eager, cards that go idle and come back, windows added and dropped midway),
every value, one event per call and batched, equals heads that move at every event and the
brute-force oracle, and so do the digests taken midway and at the end.
"""

from __future__ import annotations

import numpy as np
import pytest

from metrics_engine import plan as plan_module
from metrics_engine.language import parse

from .oracle import expected, same
from .test_lazy_eviction import DROPPED, HALF, STREAM, _engine, _plan_changes, _texts


def _run(path, lag: int, batch: int = 0) -> tuple[list[dict], list[str], int]:
    """The stream's values, digests at a few points and the most events the heads were
    behind after an event."""
    eng = _engine(path)
    core = eng._plan.streams["payments"].core
    core.lazy_head_lag = lag
    got, digests, behind = [], [], 0
    events = [(t, {**ev, "amount": ev["amount"] if isinstance(ev["amount"], int)
                   and abs(ev["amount"]) < 2**40 else 7,
                   "merchant": ev["merchant"] or "m0"}) for t, ev in STREAM] if batch else STREAM

    def feed(part):
        nonlocal behind
        if not batch:
            for t, ev in part:
                got.append(eng.ingest("payments", ev, t))
                behind = max(behind, core.heads_behind())
            return
        for lo in range(0, len(part), batch):
            rows = part[lo:lo + batch]
            cols = {k: np.array([ev[k] for _, ev in rows])
                    for k in ("card", "channel", "merchant", "amount")}
            out = eng.ingest_many("payments", np.array([t for t, _ in rows]), cols)
            behind = max(behind, core.heads_behind())
            got.extend({k: v[i] for k, v in out.items()} for i in range(len(rows)))

    feed(events[:200])
    digests.append(eng.digest())  # moves the heads first
    feed(events[200:HALF])
    _plan_changes(eng)
    feed(events[HALF:])
    digests.append(eng.digest())
    eng.close()
    return got, digests, behind


@pytest.mark.parametrize("lag", [3, 64, 10**6])
def test_heads_behind_give_the_values_and_digests_of_heads_moving_every_event(
        tmp_path, monkeypatch, lag):
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None)
    want, want_digests, never = _run(tmp_path / "every", 1)
    got, digests, behind = _run(tmp_path / "lag", lag)
    assert never == 0 and behind > 0  # they did fall behind
    assert behind < lag
    assert got == want
    assert digests == want_digests
    for text in _texts():
        for d in parse(text):
            if d.name in DROPPED:
                continue
            for i, w in enumerate(expected(d, STREAM)):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)


def test_batches_with_heads_behind_equal_heads_moving_every_event(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "LAZY_MIN_TABLES", None)
    want, want_digests, _ = _run(tmp_path / "every", 1, batch=97)
    got, digests, behind = _run(tmp_path / "lag", 10**6, batch=97)
    assert behind > 0
    assert got == want
    assert digests == want_digests
