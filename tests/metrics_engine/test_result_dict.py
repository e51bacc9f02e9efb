"""``ingest``'s dict, its values written into the entries of the template's copy by index
(native outdict.rs) rather than set by key: the same dict (names, order, values, types), in
output order and by name, over misaligned lazy windows (whose outputs take the previous
output's values again) and every window kind, through plan changes."""

from __future__ import annotations

import gc
import sys

import pytest

from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import check_values
from .streams import METRICS, events

OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8 * 1024)
# Six sliding windows of one group-by, a few seconds apart: lazy (lazy.rs), and alike, so a
# key's outputs mostly take the previous output's values.
MISALIGNED = [f"SELECT SUM(amount) AS w{i}, COUNT(*) AS k{i} FROM payments GROUP BY card "
              f"RANGE {300 + 7 * i} SECONDS" for i in range(6)]
LATE = ("SELECT SUM(amount) AS a_late, MAX(amount) AS z_late FROM payments GROUP BY merchant "
        "RANGE 1 HOURS")


def _run(tmp_path, by_index: bool, by_name: bool, keep: bool = True
         ) -> tuple[list[dict], int]:
    """Every event's dict (``keep``: the dict itself; else a copy, the dict let go of, so
    the core may fill it again), and the values set by key."""
    eng = Engine(tmp_path / f"{by_index}{by_name}{keep}", **OPTS)
    for m in MISALIGNED + METRICS:
        eng.define(m)
    core = eng._plan.streams["payments"].core
    core.fill_by_index = by_index
    ingest = eng.ingest_by_name if by_name else eng.ingest
    out = []
    for i, (t, ev) in enumerate(events(900, 5)):
        if i == 300:
            eng.define(LATE)
        if i == 600:
            eng.drop("s5")
            eng.drop("k2")
        core.fill_by_index = by_index  # a new plan keeps the setting; set it again anyway
        got = ingest("payments", ev, t)
        out.append(got if keep else dict(got))
        del got
    by_key = core.values_set_by_key()
    eng.close()
    return out, by_key


@pytest.mark.parametrize("by_name", [False, True])
def test_values_by_index_equal_values_by_key(tmp_path, by_name):
    """Same names in the same order, same values and types, by index as by key; the dicts
    outlive the engine and a collection intact (each holds its own references). On CPython
    3.11 every value went in by index."""
    fast, fast_by_key = _run(tmp_path, True, by_name)
    gc.collect()
    slow, slow_by_key = _run(tmp_path, False, by_name)
    assert slow_by_key > 0
    if sys.version_info[:2] == (3, 11):
        assert fast_by_key == 0
    assert len(fast) == len(slow) == 900
    for a, b in zip(fast, slow):
        assert list(a) == list(b)
        assert a == b
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]
    if by_name:
        assert all(list(d) == sorted(d) for d in fast)
    # Let go of each dict: the core fills it again, to the same values.
    again, _ = _run(tmp_path, True, by_name, keep=False)
    for a, b in zip(again, slow):
        assert list(a) == list(b)
        assert a == b
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]
    stream = events(900, 5)
    check_values([d for m in MISALIGNED for d in parse(m)], stream[:300], fast[:300])


def test_the_fast_path_is_taken_where_the_layout_is_known(tmp_path):
    """On CPython 3.11 the core fills by index unless told not to; the template it copies is
    never written (each call's dict is a fresh copy: changing one changes no other)."""
    eng = Engine(tmp_path / "e", **OPTS)
    for m in MISALIGNED:
        eng.define(m)
    core = eng._plan.streams["payments"].core
    assert core.fill_by_index == (sys.version_info[:2] == (3, 11))
    stream = events(50, 3)
    first = eng.ingest("payments", stream[0][1], stream[0][0])
    kept = dict(first)
    first.clear()
    second = eng.ingest("payments", stream[1][1], stream[1][0])
    assert list(second) == list(kept)
    assert all(v is not None for v in second.values())
    eng.close()


def test_a_dict_let_go_of_is_filled_again_only_as_it_was(tmp_path):
    """A dict the caller let go of is filled again (all of it, None too); one it still
    holds, or changed in its keys before letting go, is not: a fresh one comes."""
    eng = Engine(tmp_path / "e", **OPTS)
    ref = Engine(tmp_path / "ref", **OPTS)
    for m in MISALIGNED + METRICS:
        eng.define(m)
        ref.define(m)
    core = eng._plan.streams["payments"].core
    ref._plan.streams["payments"].core.fill_by_index = False  # by key, a fresh dict each
    stream = events(400, 9)
    held = []
    for i, (t, ev) in enumerate(stream):
        want = ref.ingest("payments", ev, t)
        before = core.dicts_recycled()
        got = eng.ingest("payments", ev, t)
        assert got == want and list(got) == list(want), i
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
        recycled = core.dicts_recycled() > before
        if i % 5 == 1:
            held.append((got, dict(got)))  # still held: never filled again
        elif i % 5 == 2:
            got["extra"] = 1  # a key more: not this dict's shape any longer
        elif i % 5 == 3:
            del got["w0"]
            got["w0"] = None  # same keys, another order of entries
        elif i % 5 == 4:
            got["k1"] = [1, 2]  # a value changed (a container): every value is set again
        if sys.version_info[:2] == (3, 11) and i > 0:
            # Filled again after an event whose dict was let go of unchanged in its keys.
            assert recycled == ((i - 1) % 5 in (0, 4)), i
        del got
    for d, copy in held:
        assert d == copy
    assert core.values_set_by_key() == 0 or sys.version_info[:2] != (3, 11)
    eng.close()
    ref.close()
