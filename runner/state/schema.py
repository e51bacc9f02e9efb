"""DuckDB tables of the state machine. Every table is part of snapshots and of the digest.

Each table's second field is its key, a total order: every reader that lists rows sorts by it
(snapshots dump rows in scan order; the digest is a sum of row hashes, ``runner.state.digest``).

The tables written for every order (runs, steps, app_tasks, outbox) hold their JSON documents
as VARCHAR: apply writes them with orjson, so they are always valid, and a JSON column parses
every value it is given again (it tripled the cost of flushing a run row). JSON functions
(``json_extract_string``) read VARCHAR alike, and readers get the same strings back.
"""

from __future__ import annotations

import duckdb

TABLES: dict[str, tuple[str, str]] = {
    # name: (columns, total order)
    # No primary key: apply stages each event id once while dedup holds it (expired ids are
    # deleted before a generation's inserts), and its one reader by key (an event's runs) scans
    # the runs table next anyway; the index cost the flush ~0.7-0.9 µs per order (and its
    # memory grows with the dedup window).
    "events_seen": ("event_id VARCHAR, event_type VARCHAR, offset_ BIGINT, ts BIGINT",
                    "event_id"),
    "runs": ("run_id VARCHAR PRIMARY KEY, event_id VARCHAR, event_type VARCHAR, "
             "workflow_id VARCHAR, version INTEGER, state VARCHAR, node_id VARCHAR, "
             "decision VARCHAR, started_ts BIGINT, updated_ts BIGINT, offset_ BIGINT, "
             "stored_offset BIGINT, event VARCHAR, metrics VARCHAR, scores VARCHAR, "
             "apps VARCHAR, waiting_for VARCHAR",
             "run_id"),
    # No primary key: apply writes each (run_id, seq) once, and DuckDB answers a run's steps
    # (``WHERE run_id = ?``) by a scan with or without it (its index serves only the whole
    # key); the index cost the flush ~0.7 us per step row, at its insert and its commit.
    "steps": ("run_id VARCHAR, seq INTEGER, node_id VARCHAR, node_kind VARCHAR, edge_id VARCHAR, "
              "next_node_id VARCHAR, trace VARCHAR, ts BIGINT",
              "run_id, seq"),
    "app_tasks": ("run_id VARCHAR, node_id VARCHAR, kind VARCHAR, queue VARCHAR, "
                  "status VARCHAR, deadline_ts BIGINT, created_ts BIGINT, claimed_by VARCHAR, "
                  "outcome VARCHAR, PRIMARY KEY (run_id, node_id)", "run_id, node_id"),
    # No primary key either: one row per run, written by the entry that decided it (plain
    # INSERT), and no reader looks a run up here (its row holds the decision too).
    "decisions": ("run_id VARCHAR, decision VARCHAR, ts BIGINT, offset_ BIGINT", "run_id"),
    "workflow_versions": ("workflow_id VARCHAR, version INTEGER, event_type VARCHAR, "
                          "definition JSON, published_ts BIGINT, published_by VARCHAR, "
                          "PRIMARY KEY (workflow_id, version)", "workflow_id, version"),
    "workflow_active": ("workflow_id VARCHAR PRIMARY KEY, version INTEGER, event_type VARCHAR",
                        "workflow_id"),
    "workflow_drafts": ("workflow_id VARCHAR PRIMARY KEY, definition JSON, updated_ts BIGINT, "
                        "updated_by VARCHAR", "workflow_id"),
    "metric_defs": ("name VARCHAR PRIMARY KEY, text VARCHAR, defined_ts BIGINT", "name"),
    "outbox": ("effect_id VARCHAR PRIMARY KEY, kind VARCHAR, run_id VARCHAR, payload VARCHAR, "
               "done BOOLEAN", "effect_id"),
}


def create(con: duckdb.DuckDBPyConnection) -> None:
    for name, (columns, _) in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
