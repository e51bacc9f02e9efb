"""``StreamCore.freeze``: a snapshot's copy of the native states, encoded later elsewhere.

A checkpoint's capture freezes the states on the ingesting thread and encodes them on the
checkpoint's own; the core ingests on meanwhile. The frozen copy's ``dump()`` must give the
bytes ``dump()`` gave at the freeze, whatever happened to the live states after it: keys
changed, keys created (new ids, new interned strings), keys whose events all left their
windows (ids freed, then reused by other keys), lazy raw keys (turned eager by the freeze),
calendar buckets rolled."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from metrics_engine.engine import Engine

from .streams import METRICS, T0

# Four RANGE windows of one group-by: its keys are evicted lazily (lazy.rs), and a key with
# few events is raw (a log, no states) until a dump or a freeze turns it eager.
LAZY = [f"SELECT SUM(amount) AS ds{m}, COUNT(*) AS dn{m} FROM payments GROUP BY device "
        f"RANGE {m} MINUTES" for m in (1, 2, 3, 5)]
MINUTE, DAY = 60_000, 86_400_000


def _event(rng: random.Random, i: int, card: str) -> dict:
    return {"id": i, "card": card, "merchant": f"m{rng.randrange(300)}",
            "device": f"d{rng.randrange(2000)}", "channel": rng.choice(["cnp", "cp"]),
            "amount": rng.choice([rng.randrange(1, 50_000), round(rng.uniform(1, 500), 2)])}


def _phases(seed: int) -> tuple[list, list]:
    """Events before the freeze (3,000 cards) and after it: the same cards changed, new
    cards, then two days later (every earlier key freed) fresh cards taking the freed ids."""
    rng = random.Random(seed)
    t, before, after = T0, [], []
    for i in range(6000):
        t += rng.choice([0, 50, 200])
        before.append((t, _event(rng, i, f"card-{rng.randrange(3000)}")))
    for i in range(6000, 7500):
        t += rng.choice([0, 50, 200])
        after.append((t, _event(rng, i, f"card-{rng.randrange(3000)}")))
    for i in range(7500, 9000):
        t += rng.choice([0, 50, 200])
        after.append((t, _event(rng, i, f"new-{rng.randrange(2000)}")))
    t += 2 * DAY
    for i in range(9000, 12000):
        t += rng.choice([0, 50, 200])
        after.append((t, _event(rng, i, f"late-{rng.randrange(2500)}")))
    return before, after


def _engine(path: Path) -> Engine:
    eng = Engine(path, fsync=False, chunk_bytes_target=4096, segment_bytes_max=32_768)
    for text in METRICS + LAZY:
        eng.define(text)
    return eng


def _feed(eng: Engine, evs: list) -> list[dict]:
    return [eng.ingest("payments", ev, t) for t, ev in evs]


def test_a_frozen_dump_is_the_dump_at_the_freeze_after_keys_change_come_and_go(tmp_path):
    before, after = _phases(11)
    eng = _engine(tmp_path / "e")
    _feed(eng, before)
    core = eng._plan.streams["payments"].core
    assert any(logged for logged, *_ in core.lazy_counts()), "raw keys the freeze settles"
    frozen = core.freeze()
    at_freeze = bytes(core.dump())
    ids_at_freeze = core.key_ids()
    _feed(eng, after)
    # The live state moved on: keys freed, their ids reused by new keys, strings added.
    assert bytes(core.dump()) != at_freeze
    ids_now = core.key_ids()
    assert all(made_now < made + live_now for (live_now, made_now), (_, made)
               in zip(ids_now, ids_at_freeze)), "freed ids were reused"
    assert bytes(frozen.dump()) == at_freeze
    with pytest.raises(RuntimeError, match="already dumped"):
        frozen.dump()
    eng.close()


def test_a_frozen_dump_while_the_core_ingests_on_another_thread(tmp_path):
    """The encoding runs without the GIL: ingest goes on beside it, and both are exact."""
    before, after = _phases(12)
    eng, twin = _engine(tmp_path / "e"), _engine(tmp_path / "twin")
    _feed(eng, before)
    _feed(twin, before)
    core = eng._plan.streams["payments"].core
    frozens = [core.freeze()]
    at_freeze = [bytes(core.dump())]
    out: list[bytes] = []
    dumper = threading.Thread(target=lambda: out.extend(bytes(f.dump()) for f in frozens))
    dumper.start()
    live = _feed(eng, after)
    dumper.join()
    assert out == at_freeze
    assert live == _feed(twin, after)  # the freeze changed nothing the engine gives
    assert eng.digest() == twin.digest()
    eng.close()
    twin.close()


def test_a_capture_over_many_keys_writes_the_blocking_snapshot_at_its_point(tmp_path):
    before, after = _phases(13)
    ref = _engine(tmp_path / "ref")
    _feed(ref, before)
    ref.snapshot_blocking(tmp_path / "blocking")
    ref.close()

    eng = _engine(tmp_path / "live")
    _feed(eng, before)
    cap = eng.capture()
    later = _feed(eng, after)  # keys changed, created, freed and reused before the write
    cap.write(tmp_path / "captured")
    cap.close()
    files = {str(p.relative_to(tmp_path / "captured")): p.read_bytes()
             for p in sorted((tmp_path / "captured").rglob("*")) if p.is_file()}
    blocking = {str(p.relative_to(tmp_path / "blocking")): p.read_bytes()
                for p in sorted((tmp_path / "blocking").rglob("*")) if p.is_file()}
    assert files == blocking
    back = _engine(tmp_path / "back")
    back.restore(tmp_path / "captured")
    assert _feed(back, after) == later
    back.close()
    eng.close()
