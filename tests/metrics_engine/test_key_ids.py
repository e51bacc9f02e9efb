"""Key ids shared by the windows of a group-by stay mapped to their keys (keyed.rs `KeySpace`).

Keys come and go quickly here, so ids are freed and reused all the time, while windows of
other lengths, delays and filters still hold (or no longer hold) the same keys, and lowered
rows carry ids that went stale (their key freed, the id given to another key) before the
heads evict them. Every value of every event is checked against the brute-force oracle.
"""

from __future__ import annotations

import random
import tempfile

from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

T0 = 1_700_000_000_000
WINDOWS = [
    "RANGE 2 SECONDS",
    "RANGE 9 SECONDS",
    "RANGE 5 SECONDS EXCLUDING CURRENT",
    "RANGE 3 SECONDS DELAY 4 SECONDS",  # its tail inserts rows lowered long before
    "HOPPING 6 SECONDS EVERY 2 SECONDS",
]
# Over (card, channel) the delayed window takes a row in only after the other has let it and
# its key go: the row's id is stale by then, most often taken by another key.
PAIR_WINDOWS = ["RANGE 1 SECONDS", "RANGE 2 SECONDS DELAY 5 SECONDS"]
AGGS = "COUNT(*), SUM(amount), COUNT(DISTINCT merchant), MIN(amount)"


def _metrics() -> list[str]:
    out = []
    for i, w in enumerate(WINDOWS):
        # Aliases so that metrics of the same function in other windows get other names.
        sel = ", ".join(f"{a} AS {n}{i}" for a, n in zip(AGGS.split(", "),
                                                           ["n", "s", "dm", "mn"], strict=True))
        out.append(f"SELECT {sel} FROM payments GROUP BY card {w}")
    for i, w in enumerate(PAIR_WINDOWS):
        out.append(f"SELECT COUNT(*) AS cc{i}, SUM(amount) AS cs{i} FROM payments "
                   f"GROUP BY card, channel {w}")
    # A filter: its table takes only some keys of the spaces it shares with the others.
    out.append("SELECT COUNT(*) AS fn, MIN(amount) AS fmn FROM payments WHERE channel = 'cnp' "
               "GROUP BY card RANGE 4 SECONDS")
    return out


def _events(n: int, seed: int) -> list[tuple[int, dict]]:
    """Cards drift: each is seen for a few seconds, then never again, so its id is freed and
    taken by a new card. Null amounts are skipped by SUM and MIN (rows no slot of those keeps),
    and string cards sit beside integer ones."""
    rng = random.Random(seed)
    t, out = T0, []
    for i in range(n):
        t += rng.choice([0, 100, 300, 700, 1000, 2500])
        base = i // 3
        card = rng.choice([base, base + 1, base + 2, f"k{base % 7}"])
        out.append((t, {"card": card, "channel": rng.choice(["cnp", "cp"]),
                        "merchant": rng.choice(["m1", "m2", None]),
                        "amount": rng.choice([None, rng.randrange(-40, 90), 2.5])}))
    return out


def test_key_ids_freed_and_reused_across_windows_match_the_oracle():
    stream = _events(360, 5)
    texts = _metrics()
    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(tmp, chunk_bytes_target=300, segment_bytes_max=1200, fsync=False)
        for text in texts:
            eng.define(text)
        got = [eng.ingest("payments", ev, t) for t, ev in stream]
        core = eng._plan.streams["payments"].core
        ids = core.key_ids()
        eng.close()
    cards = {ev["card"] for _, ev in stream}
    pairs = {(ev["card"], ev["channel"]) for _, ev in stream}
    # Two key spaces (card; card, channel), each of far fewer ids than it saw keys: ids were
    # freed and reused, dozens of times (calendar windows free a key that stopped coming
    # only when their sweep reaches it, so many ids stay taken a while).
    made = sorted(m for _, m in ids)
    assert made[0] + 20 < len(cards) and made[1] + 20 < len(pairs), (made, len(cards), len(pairs))
    for text in texts:
        for d in parse(text):
            want = expected(d, stream)
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)


def test_dropping_tables_of_a_shared_key_space_keeps_the_others_exact():
    """Metrics dropped midway take their tables (and their hold on key ids) with them; the
    windows left over the same group-by keep their values."""
    stream = _events(240, 9)
    texts = _metrics()
    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(tmp, chunk_bytes_target=300, segment_bytes_max=1200, fsync=False)
        for text in texts:
            eng.define(text)
        got = [eng.ingest("payments", ev, t) for t, ev in stream[:120]]
        gone = [d.name for text in texts[:3] + texts[5:6] for d in parse(text)]
        for name in gone:
            eng.drop(name)
        got += [eng.ingest("payments", ev, t) for t, ev in stream[120:]]
        eng.close()
    for text in texts[3:5] + texts[6:]:
        for d in parse(text):
            want = expected(d, stream)
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)


def _keeping_fingerprint_bits(path: str, bits: int, texts: list[str]) -> Engine:
    """An engine whose key spaces keep ``bits`` bits of each key's fingerprint, with
    ``texts`` defined."""
    eng = Engine(path, chunk_bytes_target=300, segment_bytes_max=1200, fsync=False)
    # A first metric makes the stream's core; the key spaces made after take `bits`.
    eng.define("SELECT COUNT(*) AS by_merchant FROM payments GROUP BY merchant RANGE 3 SECONDS")
    eng._plan.streams["payments"].core.key_fingerprint_bits = bits
    for text in texts:
        eng.define(text)
    return eng


def test_keys_sharing_fingerprints_keep_their_own_ids():
    """Key spaces find a key by a fingerprint of it (keyed.rs `KeySpace::index`); with 2 bits
    kept, keys share fingerprints all the time: every value still equals the oracle, and the
    digest, a snapshot restored and a batch equal an engine keeping all 64 bits."""
    stream = _events(360, 7)
    texts = _metrics()
    engines = []
    with tempfile.TemporaryDirectory() as tmp:
        for bits in (2, 64):
            eng = _keeping_fingerprint_bits(f"{tmp}/{bits}", bits, texts)
            engines.append((eng, [eng.ingest("payments", ev, t) for t, ev in stream[:300]]))
        (few, got), (full, ref) = engines
        assert sum(few._plan.streams["payments"].core.key_clashes()) > 10
        assert sum(full._plan.streams["payments"].core.key_clashes()) == 0
        assert got == ref and few.digest() == full.digest()
        few.snapshot(f"{tmp}/snap")
        again = Engine(f"{tmp}/again", fsync=False)
        again.restore(f"{tmp}/snap")
        rest = stream[300:]
        cols = {k: [ev.get(k) for _, ev in rest] for k in ("card", "channel", "merchant")}
        cols["amount"] = [ev["amount"] for _, ev in rest]
        a = few.ingest_many("payments", [t for t, _ in rest], {
            "card": [str(c) for c in cols["card"]], "channel": cols["channel"],
            "merchant": cols["merchant"], "amount": cols["amount"]})
        b = [full.ingest("payments", {**ev, "card": str(ev["card"])}, t) for t, ev in rest]
        c = [again.ingest("payments", {**ev, "card": str(ev["card"])}, t) for t, ev in rest]
        assert a == {k: [x[k] for x in b] for k in b[0]} and b == c
        assert few.digest() == full.digest() == again.digest()
        for e in (few, full, again):
            e.close()
    for text in texts:
        for d in parse(text):
            want = expected(d, stream[:300])
            for i, w in enumerate(want):
                assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)


def test_a_batch_interning_keys_with_shared_fingerprints_equals_one_event_per_call():
    """A batch hashes each row's keys a few rows ahead and interns its new keys with that
    fingerprint (plan.rs `find_ahead`, keyed.rs `KeySpace::intern_at`). With 2 bits kept,
    new keys clash, and a key among the clashes outlives the key whose fingerprint it
    shared (its cards drift: keys are freed all the time): a batch equals an engine keeping
    all 64 bits fed one event per call, value for value, and so does the digest."""
    stream = [(t, {**ev, "card": str(ev["card"])}) for t, ev in _events(900, 11)]
    with tempfile.TemporaryDirectory() as tmp:
        few, full = (_keeping_fingerprint_bits(f"{tmp}/{bits}", bits, _metrics())
                     for bits in (2, 64))
        want = [full.ingest("payments", ev, t) for t, ev in stream]
        got: dict[str, list] = {}
        for lo in range(0, len(stream), 200):
            part = stream[lo:lo + 200]
            cols = {k: [ev[k] for _, ev in part] for k in ("card", "channel", "merchant", "amount")}
            for name, vals in few.ingest_many("payments", [t for t, _ in part], cols).items():
                got.setdefault(name, []).extend(vals)
        assert sum(few._plan.streams["payments"].core.key_clashes()) > 0
        assert got == {k: [x[k] for x in want] for k in want[0]}
        assert few.digest() == full.digest()
        few.close()
        full.close()
