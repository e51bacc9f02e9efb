"""Events go to the reservoir as JSON written natively (json.rs), which keeps the JSON of
recent top-level keys by key object (`KeyCache`): the same key objects come event after
event, so each is escaped once. Keys that need escaping, keys reused across events, and
fresh key objects that push each other out of the cache's slots must all read back from
disk exactly, and a state added after a reopen, filled from those chunks, sees every value.
"""

from __future__ import annotations

import random

from metrics_engine.engine import Engine

T0 = 1_700_000_000_000
OPTS = dict(chunk_bytes_target=300, segment_bytes_max=1200, fsync=False)
ODD = ['we"ird\\key\n', "ключ", "\x01ctl", "tab\there", ""]


def _events(n: int) -> list[tuple[int, dict]]:
    rng = random.Random(9)
    out = []
    for i in range(n):
        ev = {"card": rng.randrange(7), "amount": rng.randrange(-99, 999)}
        for k in ODD:  # the same key objects every event
            ev[k] = rng.choice([k, i, None, 1.5])
        # Fresh key objects (built per event, never interned): many more than the cache's
        # slots, some equal to a key cached under another object.
        for j in rng.sample(range(150), 4):
            ev["".join(["x", str(j)])] = j
        ev["".join(["am", "ount2"])] = i
        out.append((T0 + 10 * i, ev))
    return out


def test_events_read_back_from_disk_with_every_key(tmp_path):
    stream = _events(400)
    eng = Engine(tmp_path / "e", **OPTS)
    eng.define("SELECT COUNT(*) AS n FROM payments RANGE 1 DAYS")  # its head keeps every event
    for t, ev in stream:
        eng.ingest("payments", ev, t)
    eng.close()
    eng = Engine(tmp_path / "e", **OPTS)
    res = eng._plan.streams["payments"].res
    assert res.first_pos() == 0 and res.next_pos == len(stream)
    assert res.open_no > res.chunk_base + 10  # most events come back from closed chunks
    for pos, (t, ev) in enumerate(stream):
        k, i = res.locate(pos)
        got_t, got = res.chunk(k)[i]
        assert (got_t, got) == (t, ev), pos
    # A state added now is filled from those chunks.
    eng.define("SELECT SUM(amount2) AS s2, SUM(amount) AS s FROM payments RANGE 1 DAYS")
    out = eng.ingest("payments", {"amount": 0, "amount2": 0}, stream[-1][0] + 1)
    eng.close()
    assert out["n"] == len(stream) + 1
    assert out["s2"] == sum(range(len(stream)))
    assert out["s"] == sum(ev["amount"] for _, ev in stream)
