"""The DuckDB flush writes a generation's rows as apply staged them: a replica that flushes
after every entry and one that flushes a whole generation at once hold the same rows and the
same digest, whatever confirmations, resumed runs and earlier generations the generation mixes.
"""

from __future__ import annotations

import duckdb
import orjson
import pyarrow as pa
import pytest

from runner.state import buffer, entries, schema
from runner.state.effects import StoreRun
from runner.state.machine import RunnerStateMachine
from tests.runner.fakes import BruteForceW1Engine
from tests.runner.test_digest import rows_digest
from tests.runner.test_hot_resume import CountingConnection, FlushingLog, tables
from tests.runner.test_machine import T0, order, reply, setup_w3


def node(tmp_path, name: str) -> RunnerStateMachine:
    return RunnerStateMachine(tmp_path / name, engine=BruteForceW1Engine())


def stored_of(effects: list) -> list[list]:
    return [[e.record["run_id"], e.record["offset"]] for e in effects if isinstance(e, StoreRun)]


def count(con: CountingConnection, start: str) -> int:
    return sum(1 for sql in con.statements if sql.startswith(start))


@pytest.fixture(params=["whole", "sliced"])
def slicing(request, monkeypatch):
    """As the flusher converts a generation of a node's size: a slice of rows at a time, the
    GIL given away before each column (here slices of 2 rows, a pause before every column)."""
    if request.param == "sliced":
        monkeypatch.setattr(buffer, "slice_rows", 2)
        monkeypatch.setattr(buffer, "hold_s", 0.0)
        monkeypatch.setattr(buffer, "pause_s", 0.0)
    return request.param


def test_a_generation_is_written_as_a_replica_flushing_every_entry_writes_it(tmp_path, slicing):
    hot, flushed = node(tmp_path, "hot"), node(tmp_path, "flushed")
    log = FlushingLog(hot, flushed, flushing=flushed)
    setup_w3(log, scorer="demo_score")  # runs wait for the score app: they can be resumed
    counted = hot._buffer._cursor = CountingConnection(hot._buffer._cursor)

    def same() -> None:
        assert tables(hot) == tables(flushed)
        assert hot.digest() == flushed.digest() == rows_digest(hot) == rows_digest(flushed)

    # Runs whose rows land in DuckDB before they are confirmed: the UPDATE marks them.
    early = [reply(log.apply(entries.EVENT_RECEIVED, order(f"e-{i}", card=f"e{i}"),
                             ts=T0 + i)).runs[0] for i in range(3)]
    hot.sync()
    counted.statements.clear()
    # One generation: new runs, their confirmations, a run resumed and confirmed again, the
    # confirmation of an earlier version of a run resumed since, and runs flushed earlier.
    stored, runs = [], []
    for i in range(6):
        effects = log.apply(entries.EVENT_RECEIVED, order(f"o-{i}", card=f"c{i}"), ts=T0 + 10 + i)
        stored += stored_of(effects)
        runs += reply(effects).runs
    waiting = [r["run_id"] for r in runs if r["state"] == "waiting"]
    assert len(waiting) >= 3, runs
    log.apply(entries.EFFECTS_DONE, {"stored": stored[:4], "outbox": []}, ts=T0 + 20)
    resumed = stored_of(log.apply(entries.APP_COMPLETED, {
        "run_id": waiting[0], "node_id": "score", "result": {"payment_abuse": 5}}, ts=T0 + 21))
    resumed += stored_of(log.apply(entries.APP_COMPLETED, {
        "run_id": early[0]["run_id"], "node_id": "score", "result": {"payment_abuse": 5}},
        ts=T0 + 22))
    assert len(resumed) == 2  # both decided: a new version each
    late = [s for s in stored[4:] if s[0] != waiting[0]]
    log.apply(entries.EFFECTS_DONE, {
        "stored": [*resumed, *late, [early[1]["run_id"], early[1]["offset"]],
                   [waiting[-1], 10_000]],  # a later offset than the run has: its own is kept
        "outbox": []}, ts=T0 + 23)
    assert hot._buffer.current.stored and hot._buffer.current.replaced  # one generation
    same()
    # the task of a run started earlier replaces its row; those of new runs are inserted
    assert count(counted, "INSERT OR REPLACE INTO app_tasks") == 1
    marked = dict(hot.con.execute("SELECT run_id, stored_offset >= offset_ FROM runs").fetchall())
    assert marked[early[1]["run_id"]] and not marked[early[2]["run_id"]]
    assert all(marked[run_id] for run_id, _ in [*stored, *resumed])

    # A generation of new runs only writes every row by a plain INSERT.
    counted.statements.clear()
    stored = []
    for i in range(4):
        stored += stored_of(log.apply(entries.EVENT_RECEIVED, order(f"n-{i}", card=f"n{i}"),
                                      ts=T0 + 30 + i))
    log.apply(entries.EFFECTS_DONE, {"stored": stored, "outbox": []}, ts=T0 + 40)
    same()
    assert count(counted, "INSERT OR REPLACE") == 0  # new runs, new tasks: plain inserts
    assert hot.con.execute("SELECT count(*) FROM runs WHERE stored_offset >= offset_ "
                           "AND event_id LIKE 'n-%'").fetchone() == (4,)
    for m in (hot, flushed):
        m.close()


def test_the_columns_are_converted_with_the_types_duckdb_declares():
    con = duckdb.connect(":memory:")
    schema.create(con)
    sql_of_arrow = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.int32(): "INTEGER",
                    pa.bool_(): "BOOLEAN"}
    for table, fields in (("events_seen", buffer.SEEN_FIELDS), ("runs", buffer.RUN_FIELDS),
                          ("decisions", buffer.DECISION_FIELDS), ("steps", buffer.STEP_FIELDS),
                          ("app_tasks", buffer.TASK_FIELDS), ("outbox", buffer.OUTBOX_FIELDS)):
        declared = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall()}
        assert list(declared) == list(fields), table  # every column, in order
        assert [sql_of_arrow[t] for t in buffer.arrow_types(table, fields)] == \
            [declared[f] for f in fields], table
    con.close()


def test_a_value_of_another_type_is_still_written_as_duckdb_casts_it():
    con = duckdb.connect(":memory:")
    schema.create(con)
    rows = [("e-1", "order", 3, 10), ("e-2", "order", 4, 11.0)]  # a float in a BIGINT
    buffer._insert(con, "events_seen", buffer.SEEN_FIELDS, rows, "INSERT")
    assert con.execute("SELECT * FROM events_seen ORDER BY event_id").fetchall() == \
        [("e-1", "order", 3, 10), ("e-2", "order", 4, 11)]
    con.close()


def test_an_event_id_seen_again_after_it_expired_is_held_once(tmp_path):
    """events_seen has no key: the flush deletes a generation's expired ids before inserting
    its new sightings, so an id seen again in the same generation is held once, as seen last."""
    minute = 60_000
    hot, flushed = (RunnerStateMachine(tmp_path / name, engine=BruteForceW1Engine(),
                                       dedup_retention_ms=minute) for name in ("hot", "flushed"))
    log = FlushingLog(hot, flushed, flushing=flushed)
    setup_w3(log)
    log.apply(entries.EVENT_RECEIVED, order("a", card="c1"), ts=T0)
    hot.sync()
    log.apply(entries.EVENT_RECEIVED, order("b", card="c2"), ts=T0 + 2 * minute)  # "a" expires
    again = reply(log.apply(entries.EVENT_RECEIVED, order("a", card="c1"), ts=T0 + 2 * minute))
    assert again.result["duplicate"] is False
    assert tables(hot) == tables(flushed)
    seen = hot.con.execute("SELECT event_id, offset_ FROM events_seen ORDER BY event_id").fetchall()
    assert seen == [("a", again.result["offset"]), ("b", again.result["offset"] - 1)]
    assert hot.digest() == flushed.digest() == rows_digest(hot)
    for m in (hot, flushed):
        m.close()


def test_a_generation_that_fails_to_write_leaves_no_row():
    """The relation inserts run in the flush's transaction: a later statement that fails rolls
    back the rows inserted before it."""
    con = duckdb.connect(":memory:")
    schema.create(con)
    gen = buffer._Generation()
    gen.seen["e-1"] = ("e-1", "order", 1, 10)
    gen.decisions["r-1"] = ("r-1", "approve", 10, 1)
    gen.outbox.append(("wh.r-1.n", "webhook", "r-1", "{}", "not a boolean"))  # fails the cast
    with pytest.raises(duckdb.Error):
        buffer._write(con.cursor(), gen)
    for table in ("events_seen", "decisions", "outbox"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    con.close()


def test_a_sliced_conversion_gives_the_gil_away_and_writes_the_same_rows(monkeypatch):
    """Rows of many slices, with JSON documents staged as dicts, bytes and text, and one value
    of another type (a float in a BIGINT column, in the last slice only): the same rows as the
    conversion of the whole table at once, and the flusher paused between the slices' columns."""
    monkeypatch.setattr(buffer, "slice_rows", 3)
    monkeypatch.setattr(buffer, "hold_s", 0.0)
    pauses = []
    monkeypatch.setattr(buffer.time, "sleep", pauses.append)
    steps = [(f"r-{i}", i, "n", "score", None, "end",
              [b'{"a":%d}' % i, {"b": [i, "\u00e9\n"]}, '{"c":1}'][i % 3], 100 + i)
             for i in range(10)]
    runs_of_bytes = [step[:6] + (b'{"t":"%d"}' % step[1], step[7]) for step in steps]
    floats = [*runs_of_bytes[:-1], runs_of_bytes[-1][:7] + (109.0,)]
    for rows in (steps, runs_of_bytes, floats):
        whole, sliced = (duckdb.connect(":memory:") for _ in range(2))
        for con in (whole, sliced):
            schema.create(con)
        buffer._insert(whole, "steps", buffer.STEP_FIELDS, rows, "INSERT",
                       buffer.STEP_JSON_COLUMNS)
        pauses.clear()
        buffer._insert(sliced, "steps", buffer.STEP_FIELDS, rows, "INSERT",
                       buffer.STEP_JSON_COLUMNS, buffer.Pacer())
        assert len(pauses) >= len(buffer.STEP_FIELDS) * 3  # before each column of each slice
        query = "SELECT * FROM steps ORDER BY seq"
        assert sliced.execute(query).fetchall() == whole.execute(query).fetchall()
        sliced.close()
    assert [t for (t,) in whole.execute("SELECT trace FROM steps ORDER BY seq").fetchall()] == \
        [b'{"t":"%d"}'.decode() % i for i in range(10)]  # the last rows: bytes copied as text
    whole.close()
    text = {bytes: bytes.decode, dict: lambda d: orjson.dumps(d).decode(), str: str}
    first = duckdb.connect(":memory:")
    schema.create(first)
    buffer._insert(first, "steps", buffer.STEP_FIELDS, steps, "INSERT", buffer.STEP_JSON_COLUMNS,
                   buffer.Pacer())
    assert [t for (t,) in first.execute("SELECT trace FROM steps ORDER BY seq").fetchall()] == \
        [text[step[6].__class__](step[6]) for step in steps]
    first.close()


def test_json_bytes_are_copied_into_arrow_as_the_text_they_encode():
    docs = [orjson.dumps(d) for d in ({"a": "\u00e9\u2603"}, [], {"n": None, "x": 1.5})]
    column = buffer._json_column(tuple(docs))
    assert column.type == pa.string()
    assert column.to_pylist() == [d.decode() for d in docs]
    column.validate(full=True)  # offsets and UTF-8 as Arrow checks them
    mixed = buffer._json_column((docs[0], {"b": 2}, '{"c":3}'))
    assert mixed.to_pylist() == [docs[0].decode(), '{"b":2}', '{"c":3}']
