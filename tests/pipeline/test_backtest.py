"""Backtest of the seed's example workflow on events whose decisions are known by hand."""

import pytest

from pipeline.backtest import VersionRef, backtest, compile_ref, summarize, walk
from workflows.examples import sift_example, w3_demo

# (event_id, country, amount, score, review outcome, card_count_5m, merchant_avg_5m)
ROWS = [
    ("e1", "US", 100, 95.0, None, 1, 100.0),      # > 90: block whatever the country
    ("e2", "DE", 100, 85.0, None, 1, 100.0),      # > 80 abroad: block
    ("e3", "US", 100, 85.0, None, 1, 100.0),      # > 80 at home: review, no answer in history
    ("e4", "CA", 100, 70.0, "accept", 1, 100.0),  # review, accepted in history
    ("e5", "CA", 100, 70.0, "reject", 1, 100.0),  # review, rejected in history
    ("e6", "US", 100, 10.0, None, 6, 100.0),      # low score; w3 blocks on card velocity
    ("e7", "FR", 100, None, None, 1, 100.0),      # score not recorded
    ("e8", "US", 5000, 10.0, None, 1, 100.0),     # low score; w3 reviews amount > 10 x avg
]
EXPECTED = {
    "e1": ("decided", "block", "event>score>block_high_score"),
    "e2": ("decided", "block", "event>score>block_foreign"),
    "e3": ("needs_app_answer", None, "event>score>review"),
    "e4": ("decided", "approve", "event>score>review>approve_reviewed"),
    "e5": ("decided", "block", "event>score>review>block_reviewed"),
    "e6": ("decided", "approve", "event>score>approve"),
    "e7": ("missing_score", None, "event>score"),
    "e8": ("decided", "approve", "event>score>approve"),
}


@pytest.fixture(scope="module")
def history(spark):
    rows = [(i, e, c, a, s, r, n, m, f"card{i}") for i, (e, c, a, s, r, n, m) in enumerate(ROWS)]
    return spark.createDataFrame(
        rows,
        "seq long, event_id string, country string, amount long, score_payment_abuse double, "
        "app_review_outcome string, card_count_5m long, merchant_avg_5m double, card string",
    ).withColumn("card_sum_5m", __import__("pyspark.sql.functions").sql.functions.col("amount"))


def test_sift_example_decisions_are_the_known_ones(history):
    out = {r.event_id: (r.status, r.action, r.path) for r in backtest(history, sift_example(), 3)
           .collect()}
    assert out == EXPECTED


def test_compare_with_w3_reports_changed_orders(history):
    out = backtest(history, w3_demo(), 2, base=(sift_example(), 1)).cache()
    got = {r.event_id: (r.action, r.path, r.base_action) for r in out.collect()}
    assert got["e6"] == ("block", "event>block_velocity", "approve")
    assert got["e8"][1] == "event>score>review" and got["e8"][2] == "approve"
    s = summarize(out, compare=True)
    assert s["events"] == len(ROWS)
    assert s["by_action"]["decided:block"] == 4  # e1, e2, e5 (rejected in review), e6
    changes = {(c["from"], c["to"]): c["count"] for c in s["compare"]["changes"]}
    # e6 approve -> block; e8 approve -> needs_app_answer (review, no answer); nothing else.
    assert changes == {("approve", "block"): 1, ("approve", "needs_app_answer"): 1}
    assert s["compare"]["decision_changed"] == 2


def test_walk_stops_at_review_without_answer():
    v = compile_ref(VersionRef.of(sift_example(), 1))
    o = walk(v, {"country": "US"}, {}, {"payment_abuse": 70.0}, {})
    assert (o.status, o.waiting_node, o.action) == ("needs_app_answer", "review", None)


def test_only_the_event_fields_the_walk_reads_are_converted():
    from pipeline.backtest import _event_fields_read
    from runner.demo import w3_definition
    from workflows import Workflow

    versions = [compile_ref(VersionRef.of(w3_demo(), 2)), compile_ref(VersionRef.of(
        sift_example(), 1))]
    assert _event_fields_read(versions) == {"country", "amount"}
    builtin = compile_ref(VersionRef.of(Workflow.model_validate(w3_definition()), 1))
    assert _event_fields_read([builtin]) is None  # the demo scorer reads the whole event


def test_the_summary_names_nodes_walked_one_row_at_a_time(spark, history, tmp_path):
    """A criterion the column walk cannot evaluate (``has()``) steps its node's rows one by
    one; the summary and its tables say where and for how many runs, for each version."""
    import pyarrow.parquet as pq

    from pipeline.backtest import write_tables
    from tests.workflows.builders import build, node, small

    wf = small(metrics=["card_count_5m"])
    node(wf, "score")["scores"] = ["payment_abuse"]
    node(wf, "score")["edges"][0]["criteria"] = "scores.payment_abuse > 90.0"
    node(wf, "score")["edges"][1]["criteria"] = "has(event.card) && event.amount > 1000"
    draft = build(wf)
    out = backtest(history, draft, 1, base=(sift_example(), 1)).cache()
    rows = out.collect()
    scored = [r for r in rows if r.event_id != "e7"]  # e7 has no score: never tries the edges
    assert {r.uncompiled for r in scored} == {"score"}
    assert all(r.base_uncompiled is None for r in rows)  # the sift example runs on columns
    assert next(r for r in rows if r.event_id == "e7").uncompiled is None
    s = summarize(out, compare=True, workflow=draft, version=1)
    assert s["uncompiled"] == [{"version": "version", "node_id": "score",
                                "runs": len(scored)}]
    # the per-row walk and the column walk agree on every order all the same
    v = compile_ref(VersionRef.of(draft, 1))
    for r in rows:
        src = next(x for x in ROWS if x[0] == r.event_id)
        _, country, amount, score, review, count, avg = src
        o = walk(v, {"country": country, "amount": amount, "card": "c"},
                 {"card_count_5m": count},
                 {"payment_abuse": score} if score is not None else {}, {})
        assert (r.status, r.action, r.path) == (o.status, o.action, o.path)
    write_tables(s, str(tmp_path))
    assert pq.read_table(tmp_path / "uncompiled.parquet").to_pylist() == s["uncompiled"]
