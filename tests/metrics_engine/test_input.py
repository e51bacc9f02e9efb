"""Events the metrics cannot take are refused whole; grouping does not depend on history."""

from __future__ import annotations

import pytest

from metrics_engine import Engine, MetricInputError

Q = "SELECT SUM(amount) AS s, COUNT(DISTINCT merchant) AS dm FROM p GROUP BY card RANGE 5 MINUTES"


@pytest.fixture
def engine(tmp_path):
    eng = Engine(tmp_path / "e", fsync=False, chunk_bytes_target=256)
    yield eng
    eng.close()


@pytest.mark.parametrize("field, bad", [
    ("card", {"id": 1}), ("card", ["c1"]), ("amount", [5]), ("merchant", {"m": 1}),
])
def test_a_non_scalar_key_or_value_is_refused_before_anything_changes(engine, field, bad):
    engine.define(Q)
    engine.ingest("p", {"card": "c1", "amount": 5, "merchant": "m1"}, 0)
    before = (engine.digest(), engine.positions())
    with pytest.raises(MetricInputError) as e:
        engine.ingest("p", {"card": "c1", "amount": 7, "merchant": "m2", field: bad}, 1_000)
    assert e.value.field == field and field in str(e.value)
    assert isinstance(e.value, ValueError)
    assert (engine.digest(), engine.positions()) == before
    # The next event sees exactly the state before the refused one.
    assert engine.ingest("p", {"card": "c1", "amount": 1, "merchant": "m1"}, 2_000) == \
        {"s": 6, "dm": 1}


def test_fields_no_metric_uses_may_hold_anything(engine):
    engine.define(Q)
    out = engine.ingest("p", {"card": "c1", "amount": 5, "merchant": "m", "extra": {"a": [1]}}, 0)
    assert out == {"s": 5, "dm": 1}


KEYS = "SELECT COUNT(*) AS n, COUNT(DISTINCT v) AS dv FROM p GROUP BY k RANGE UNBOUNDED"


def _feed(eng, items, t0=0, step=1):
    return [eng.ingest("p", {"k": k, "v": v}, t0 + i * step) for i, (k, v) in enumerate(items)]


def test_one_and_one_point_zero_are_one_key_true_is_another_across_restore(tmp_path):
    """Numbers group by value (1 == 1.0); booleans are not numbers; the same after a
    snapshot/restore and a clean reopen, whatever order the keys first came in."""
    a = Engine(tmp_path / "a", fsync=False)
    a.define(KEYS)
    got = _feed(a, [(True, 1), (1.0, 1.0), (1, True), ("1", "1")])
    assert [o["n"] for o in got] == [1, 1, 2, 1]
    assert [o["dv"] for o in got] == [1, 1, 2, 1]  # 1 and 1.0 one value, True another
    a.snapshot(tmp_path / "snap")
    b = Engine(tmp_path / "b", fsync=False)
    b.restore(tmp_path / "snap")
    assert b.digest() == a.digest()
    more = [(1, 1), (True, True), (1.0, 2)]
    want = _feed(a, more, 10)
    assert _feed(b, more, 10) == want == [{"n": 3, "dv": 2}, {"n": 2, "dv": 2},
                                         {"n": 4, "dv": 3}]
    assert b.query("n", 1.0, 20) == b.query("n", 1, 20) == 4
    assert b.query("n", True, 20) == 2
    b.close()
    c = Engine(tmp_path / "b", fsync=False)  # a clean reopen reads the state files back
    assert c.digest() == a.digest()
    assert _feed(c, [(1.0, 5)], 30) == _feed(a, [(1.0, 5)], 30) == [{"n": 5, "dv": 4}]
    c.close()
    a.close()


def test_key_order_does_not_change_the_digest(tmp_path):
    digests = []
    for name, order in (("x", [1, 1.0, True]), ("y", [1.0, True, 1])):
        eng = Engine(tmp_path / name, fsync=False)
        eng.define(KEYS)
        _feed(eng, [(k, 0) for k in order], step=0)
        digests.append(eng.digest())
        eng.close()
    assert digests[0] == digests[1]
