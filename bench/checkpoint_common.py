"""What the in-process checkpoint benchmarks share: their arguments and the feeding of W3
orders through the real state machine (``bench/apply_cost.py``'s feed)."""

from __future__ import annotations

import argparse

from replog.entry import Entry
from runner.state.machine import RunnerStateMachine


def parser(doc: str, *, orders_help: str, rounds_default: int | None, rounds_help: str,
           gap_default: int, gap_help: str) -> argparse.ArgumentParser:
    """The arguments every checkpoint benchmark takes; a benchmark adds its own after."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--orders", type=int, default=None, help=orders_help)
    ap.add_argument("--rounds", type=int, default=rounds_default, help=rounds_help)
    ap.add_argument("--gap", type=int, default=gap_default, help=gap_help)
    ap.add_argument("--seed", type=int, default=7)
    return ap


def apply_orders(sm: RunnerStateMachine, records: list[tuple[int, bytes]], cursor: int,
                 orders: int) -> int:
    """Apply ``records`` from ``cursor`` until ``orders`` orders (and the entries between
    them) are applied; the next cursor."""
    applied = 0
    while cursor < len(records) and applied < orders:
        offset, raw = records[cursor]
        applied += b"EventReceived" in raw[:64]
        sm.apply(Entry.decode(raw, offset))
        cursor += 1
    return cursor


def apply_entries(sm: RunnerStateMachine, records: list[tuple[int, bytes]], cursor: int,
                  entries: int) -> int:
    """Apply the next ``entries`` records from ``cursor``; the next cursor."""
    for offset, raw in records[cursor:cursor + entries]:
        sm.apply(Entry.decode(raw, offset))
    if cursor + entries > len(records):
        raise SystemExit("the feed ran out of entries: a bug in the feed's size")
    return cursor + entries


def orders_applied(sm: RunnerStateMachine) -> int:
    sm.flush()
    return sm.con.execute("SELECT count(*) FROM events_seen").fetchone()[0]
