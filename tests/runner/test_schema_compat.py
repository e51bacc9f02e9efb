"""runner.state.schema: the per-order tables hold JSON documents as VARCHAR. A snapshot taken
with the former JSON columns restores into them, and both states digest alike."""

from __future__ import annotations

import duckdb
import orjson

from runner.state import schema, snapshot


class NoEngine:
    """A state without a metrics engine: only the tables are snapshotted and hashed."""


def _former_schema(con: duckdb.DuckDBPyConnection) -> None:
    for name, (columns, _) in schema.TABLES.items():
        former = (columns.replace("event VARCHAR", "event JSON")
                  .replace("metrics VARCHAR", "metrics JSON")
                  .replace("scores VARCHAR", "scores JSON").replace("apps VARCHAR", "apps JSON")
                  .replace("trace VARCHAR", "trace JSON").replace("outcome VARCHAR", "outcome JSON")
                  .replace("payload VARCHAR", "payload JSON"))
        con.execute(f"CREATE TABLE {name} ({former})")


def _fill(con: duckdb.DuckDBPyConnection) -> None:
    doc = orjson.dumps({"data": {"card": "c1", "amount": 1250}, "é": [1, 2.5, None]}).decode()
    con.execute("INSERT INTO runs VALUES ('r1', 'e1', 'order', 'w', 1, 'decided', 'n', 'ok', 1, "
                "2, 3, -1, ?, '{\"m\":1}', '{}', '{}', NULL)", [doc])
    con.execute("INSERT INTO steps VALUES ('r1', 0, 'n', 'decision', 'e', NULL, ?, 2)", [doc])
    con.execute("INSERT INTO outbox VALUES ('e3.0', 'webhook', 'r1', ?, false)", [doc])


def test_a_snapshot_of_json_columns_restores_and_digests_alike(tmp_path):
    former = duckdb.connect(":memory:")
    _former_schema(former)
    _fill(former)
    writer = snapshot.capture(former, NoEngine(), 3)
    writer.write(tmp_path / "snap")
    writer.close()

    now = duckdb.connect(":memory:")
    schema.create(now)
    assert snapshot.restore(now, NoEngine(), tmp_path / "snap") == 3
    assert snapshot.digest(now, NoEngine()) == snapshot.digest(former, NoEngine())
    card = now.execute("SELECT json_extract_string(event, '$.data.card') FROM runs").fetchone()
    assert card == ("c1",)  # JSON functions read the VARCHAR documents


def test_the_per_order_tables_store_the_documents_as_given():
    con = duckdb.connect(":memory:")
    schema.create(con)
    _fill(con)
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                             "WHERE table_name = 'runs'").fetchall())
    assert types["event"] == types["metrics"] == "VARCHAR"
    (event,) = con.execute("SELECT event FROM runs").fetchone()
    assert orjson.loads(event)["data"]["amount"] == 1250
