"""advance_batch takes, row for row, the walk advance takes: same stop, decision and path, on
generated workflows (every outside kind, criteria in and out of what columns evaluate) and
generated events (absent values, NaN, ints past 2^53, timed-out and webhook answers)."""

import math

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.workflows.test_random_dags import _node
from workflows import BatchColumns, Workflow, advance, advance_batch, compile_version

from .builders import edge

KINDS = ["score", "app", "review_queue", "webhook"]
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EVENT_CRITERIA = [
    "event.amount > {i}", "event.amount <= {i}", "event.amount == {i}",
    'event.country in ["US", "CA"]', '!(event.country == "DE")', 'event.country != "FR"',
    "double(event.amount) > {i}.5", "event.amount * 3 - 7 > {i}", "event.amount + {i} >= 9000",
    "event.is_fraud", "event.is_fraud == false", "has(event.ip)", "size(event.country) > 2",
    "event.amount > {i} ? true : false", "event.amount > {i} || event.is_fraud",
]


def _own(kind, nid, i):
    return {
        # NaN against an int literal, bare, negated and under ||: CEL's comparison with NaN
        # is no plain false (negating it does not match), so those rows must go row by row
        "score": [f"scores.s_{nid} > {i}.0", f"scores.s_{nid} > {i}",
                  f"!(scores.s_{nid} > {i})", f"!(scores.s_{nid} == {i}) || event.is_fraud",
                  f"double(event.amount) > 10.0 * scores.s_{nid}",
                  f"scores.s_{nid} / 2.0 < {i}.0"],
        "app": [f"apps.{nid}.flag || apps.{nid}.level > {i % 7}",
                f"apps.{nid}.flag && !(apps.{nid}.level in [1, 2])"],
        "review_queue": [f'apps.{nid}.outcome == "accept"'],
        "webhook": [f"apps.{nid}.status_code == 200", f"apps.{nid}.status_code == 0"],
    }[kind]


def _negated(draw, crit: str) -> str:
    """``crit`` or, sometimes, ``!(crit)``: a NaN or a missing field under ``!`` is where a
    column's plain boolean and CEL's answer part."""
    return f"!({crit})" if draw(st.integers(0, 3)) == 0 else crit


@st.composite
def workflows_(draw):
    kinds = draw(st.lists(st.sampled_from(KINDS), max_size=6))
    inner = [f"n{i}" for i in range(len(kinds))]
    decisions = [f"d{i}" for i in range(draw(st.integers(1, 3)))]
    order = ["event", *inner]
    edges = {nid: [] for nid in order}
    for i, nid in enumerate(inner):
        edges[order[draw(st.integers(0, i))]].append(nid)
    for d in decisions:
        edges[order[draw(st.integers(0, len(order) - 1))]].append(d)
    nodes = [{"kind": "event", "id": "event"}]
    nodes += [_node(k, nid) for k, nid in zip(kinds, inner, strict=True)]
    nodes += [{"kind": "decision", "id": d, "action": "approve"} for d in decisions]
    by_id = {n["id"]: n for n in nodes}
    counter = iter(range(10_000))
    for i, nid in enumerate(order):
        later = order[i + 1:] + decisions
        out = []
        for t in edges[nid] + draw(st.lists(st.sampled_from(later), max_size=2)):
            kind = by_id[nid]["kind"]
            # half the criteria of a node with outputs read them (NaN scores, app answers)
            pool = EVENT_CRITERIA if kind == "event" or draw(st.booleans()) else \
                _own(kind, nid, 0)
            crit = _negated(draw, draw(st.sampled_from(pool)).format(i=draw(st.integers(0, 99))))
            if draw(st.booleans()):
                other = draw(st.sampled_from(pool)).format(i=draw(st.integers(0, 99)))
                crit = f"({crit}) {draw(st.sampled_from(['&&', '||']))} ({other})"
            crit = _negated(draw, crit)
            out.append(edge(f"e{next(counter)}", t, crit))
        out.insert(draw(st.integers(0, len(out))),
                   edge(f"e{next(counter)}", draw(st.sampled_from(later)), default=True))
        by_id[nid]["edges"] = out
    wf = {"id": "random", "name": "random", "event_type": "order", "root": "event",
          "nodes": nodes}
    return compile_version(Workflow.model_validate(wf), 1), kinds, inner


def _maybe(draw, values, absent=0.15):
    return [None if draw(st.floats(0, 1)) < absent else v for v in values]


@st.composite
def cases(draw):
    version, kinds, inner = draw(workflows_())
    rows = draw(st.integers(1, 40))
    amounts = draw(st.lists(st.one_of(st.integers(-50, 10_000),
                                      st.sampled_from([2 ** 53 + 1, -(2 ** 62), 2 ** 62])),
                            min_size=rows, max_size=rows))
    event = {
        "amount": pa.array(_maybe(draw, amounts), pa.int64()),
        "country": pa.array(_maybe(draw, draw(st.lists(
            st.sampled_from(["US", "CA", "DE", "FR", "GB"]), min_size=rows, max_size=rows)))),
        "is_fraud": pa.array(_maybe(draw, draw(st.lists(st.booleans(), min_size=rows,
                                                        max_size=rows)))),
        "ip": pa.array(_maybe(draw, ["1.2.3.4"] * rows, 0.5)),
    }
    scores, apps = {}, {}
    for kind, nid in zip(kinds, inner, strict=True):
        if kind == "score":
            values = draw(st.lists(st.one_of(st.floats(0, 100), st.just(math.nan)),
                                   min_size=rows, max_size=rows))
            scores[f"s_{nid}"] = pa.array(_maybe(draw, values, 0.3), pa.float64())
        elif kind == "app":
            present = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
            timed = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
            apps[nid] = {
                "flag": pa.array([draw(st.booleans()) if p and not t else None
                                  for p, t in zip(present, timed, strict=True)]),
                "level": pa.array([draw(st.integers(0, 9)) if p and not t else None
                                   for p, t in zip(present, timed, strict=True)], pa.int64()),
                "timed_out": pa.array([True if p and t else None
                                       for p, t in zip(present, timed, strict=True)]),
            }
        elif kind == "review_queue":
            apps[nid] = {"outcome": pa.array(_maybe(draw, draw(st.lists(
                st.sampled_from(["accept", "reject"]), min_size=rows, max_size=rows)), 0.4))}
        elif draw(st.booleans()):  # a webhook whose answer history holds, for some rows
            apps[nid] = {"status_code": pa.array(_maybe(draw, draw(st.lists(
                st.sampled_from([200, 500]), min_size=rows, max_size=rows)), 0.5), pa.int64())}
    return version, BatchColumns(rows, event, scores, {}, apps)


def _context(cols: BatchColumns, i: int) -> dict:
    def pick(record):
        return {k: v[i].as_py() for k, v in record.items() if v[i].is_valid}

    apps = {n: pick(outputs) for n, outputs in cols.apps.items()}
    return {"event": pick(cols.event), "scores": pick(cols.scores), "metrics": {},
            "apps": {n: o for n, o in apps.items() if o}}


def _expect(version, ctx):
    w = advance(version, ctx)
    nodes = (version.root, *(s.next_node_id for s in w.steps))
    return w.node_id, w.decision is not None, nodes, tuple(s.edge_id for s in w.steps)


def _got(b, i):
    nodes, edges = b.paths[b.path[i]]
    return b.node_ids[b.stop[i]], bool(b.decided[i]), nodes, edges


@SETTINGS
@given(cases())
def test_batch_walk_equals_advance_row_for_row(case):
    version, cols = case
    b = advance_batch(version, cols)
    for i in range(cols.rows):
        assert _got(b, i) == _expect(version, _context(cols, i)), i
    named = {nid for nid, _ in b.uncompiled}
    assert set(b.uncompiled_rows) == named
    for nid, rows in b.uncompiled_rows.items():  # rows stepped there did stand there
        assert all(nid in _got(b, i)[2][:-1] for i in rows.tolist())


@SETTINGS
@given(cases())
def test_answered_score_nodes_walk_on_as_a_row_walk_does(case):
    """A score node answered inline (as apply answers built-in scorers) and walked on."""
    version, cols = case

    def answer(work, contexts):
        if work.kind != "score":
            return None
        return [{s: float(c["event"].get("amount", 0) % 97) for s in work.scores}
                for c in contexts]

    b = advance_batch(version, cols, answer)
    for i in range(cols.rows):
        ctx = _context(cols, i)
        node, nodes, edges = None, [version.root], []
        while True:
            w = advance(version, ctx, node)
            nodes += [s.next_node_id for s in w.steps]
            edges += [s.edge_id for s in w.steps]
            for work in w.webhooks:
                ctx["apps"][work.node_id] = {"status_code": 0}
            node = w.node_id
            if w.waiting is not None and w.waiting.kind == "score":
                out = answer(w.waiting, [ctx])[0]
                ctx["apps"][node] = out
                ctx["scores"].update(out)
                continue
            break
        assert _got(b, i) == (node, w.decision is not None, tuple(nodes), tuple(edges)), i


def test_columns_do_the_work_on_plain_criteria():
    from workflows.examples import w3_demo

    version = compile_version(w3_demo(), 1)
    n = 1000
    rng = np.random.default_rng(1)
    cols = BatchColumns(n, event={"amount": pa.array(rng.integers(1, 5000, n)),
                                  "country": pa.array(rng.choice(["US", "DE"], n))},
                        scores={"payment_abuse": pa.array(rng.uniform(0, 100, n))},
                        metrics={"card_count_5m": pa.array(rng.integers(1, 8, n)),
                                 "merchant_avg_5m": pa.array(rng.uniform(1, 900, n))})
    b = advance_batch(version, cols)
    assert b.steps_per_row == 0 and b.uncompiled == ()
    for i in range(0, n, 7):
        ctx = {"event": {"amount": cols.event["amount"][i].as_py(),
                         "country": cols.event["country"][i].as_py()},
               "scores": {"payment_abuse": cols.scores["payment_abuse"][i].as_py()},
               "metrics": {k: v[i].as_py() for k, v in cols.metrics.items()}}
        assert _got(b, i) == _expect(version, ctx)


def test_uncompiled_nodes_are_named_with_the_rows_stepped_there():
    from .builders import build, node, small

    wf = small()
    crit = "has(event.ip) && event.amount > 1000"
    node(wf, "score")["edges"][1]["criteria"] = crit
    version = compile_version(build(wf), 1)
    risk = [95.0, None, 10.0, 50.0, None, 99.0]
    cols = BatchColumns(6, event={"amount": pa.array([5000, 10, 2000, 10, 1, 3]),
                                  "ip": pa.array(["1.2.3.4", None, None, "5.6.7.8", None, None])},
                        scores={"risk": pa.array(risk, pa.float64())})
    b = advance_batch(version, cols)
    assert b.uncompiled == (("score", crit),)
    # every row standing at the score node with its score went through workflows.step there
    assert b.uncompiled_rows["score"].tolist() == [0, 2, 3, 5]
    assert b.steps_per_row == 4
    for i in range(cols.rows):
        assert _got(b, i) == _expect(version, _context(cols, i)), i


NAN_CRITERIA = [
    "!(scores.risk {op} {i})", "!(scores.risk {op} {i}) || event.amount > {j}",
    "event.amount > {j} || !(scores.risk {op} {i})", "!((scores.risk {op} {i}) || event.is_fraud)",
    "!(scores.risk {op} {i}) && !event.is_fraud", "!(double(event.amount) {op} scores.risk)",
]


@st.composite
def nan_cases(draw):
    """A score node whose first edge compares a score (NaN for many rows) with an int literal
    under ``!`` and ``||``: the rows CEL answers otherwise than numpy's NaN comparisons."""
    from .builders import build, node, small

    crit = draw(st.sampled_from(NAN_CRITERIA)).format(
        op=draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="])),
        i=draw(st.integers(0, 99)), j=draw(st.integers(0, 5000)))
    wf = small()
    node(wf, "score")["edges"][0]["criteria"] = crit
    rows = draw(st.integers(1, 30))
    risk = draw(st.lists(st.one_of(st.just(math.nan), st.floats(0, 100),
                                   st.integers(0, 99).map(float)), min_size=rows, max_size=rows))
    amount = draw(st.lists(st.integers(0, 10_000), min_size=rows, max_size=rows))
    fraud = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    return compile_version(build(wf), 1), BatchColumns(
        rows, event={"amount": pa.array(amount, pa.int64()), "is_fraud": pa.array(fraud)},
        scores={"risk": pa.array(risk, pa.float64())})


@SETTINGS
@given(nan_cases())
def test_nan_against_int_literals_under_not_and_or_walks_as_advance(case):
    version, cols = case
    b = advance_batch(version, cols)
    for i in range(cols.rows):
        assert _got(b, i) == _expect(version, _context(cols, i)), i
