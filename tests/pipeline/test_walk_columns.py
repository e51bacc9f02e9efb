"""The backtest's column walk gives, row for row, the outcome of the per-order ``Walker``."""

import random

import pyarrow as pa
import pytest

from pipeline.walk import Walker, walk_columns
from workflows import BatchColumns, compile_version
from workflows.examples import sift_example, w3_demo

ROWS = 2_000


def _rows(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for i in range(ROWS):
        rows.append({
            "country": rnd.choice(["US", "CA", "DE", "FR", None]),
            "amount": rnd.choice([rnd.randint(1, 20_000), None]),
            "card": f"card{rnd.randint(0, 50)}",
            "payment_abuse": rnd.choice([rnd.uniform(0, 100), 91.0, 80.0, None]),
            "review": rnd.choice(["accept", "reject", None, None]),
            "card_count_5m": rnd.choice([rnd.randint(0, 9), None]),
            "merchant_avg_5m": rnd.choice([rnd.uniform(1, 2_000), None]),
            "i": i,
        })
    return rows


def _columns(rows: list[dict]) -> BatchColumns:
    def col(name, type_):
        return pa.array([r[name] for r in rows], type_)

    return BatchColumns(
        len(rows),
        event={"country": col("country", pa.string()), "amount": col("amount", pa.int64()),
               "card": col("card", pa.string())},
        scores={"payment_abuse": col("payment_abuse", pa.float64())},
        metrics={"card_count_5m": col("card_count_5m", pa.int64()),
                 "merchant_avg_5m": col("merchant_avg_5m", pa.float64())},
        apps={"review": {"outcome": col("review", pa.string())}},
    )


def _present(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("make", [sift_example, w3_demo])
@pytest.mark.parametrize("seed", [1, 2])
def test_walk_columns_equals_the_walker_row_for_row(make, seed):
    version = compile_version(make(), 1)
    rows = _rows(seed)
    got = walk_columns(version, _columns(rows))
    walker = Walker(version)
    statuses = set()
    for i, r in enumerate(rows):
        event = _present({"country": r["country"], "amount": r["amount"], "card": r["card"]})
        scores = _present({"payment_abuse": r["payment_abuse"]})
        metrics = _present({"card_count_5m": r["card_count_5m"],
                            "merchant_avg_5m": r["merchant_avg_5m"]})
        apps = {"review": {"outcome": r["review"]}} if r["review"] is not None else {}
        want = walker.walk(event, metrics, scores, apps)
        row = {f: got[f][i].as_py() for f in got}
        assert row.pop("uncompiled") is None  # every criterion of these runs on columns
        assert row == {"status": want.status, "action": want.action,
                       "decision_node": want.decision_node, "path": want.path,
                       "waiting_node": want.waiting_node, "edges": want.edges}, (i, r)
        statuses.add(want.status)
    # the sample reaches every way a walk can end
    assert statuses == {"decided", "needs_app_answer", "missing_score"}
