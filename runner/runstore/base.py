"""The ``RunRecord`` written to the run store, the ``RunStore`` protocol and its factory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from runner.runstore import keys

if TYPE_CHECKING:
    from runner.settings import Settings

lookup_runs_max = 1_000  # a lookup returns at most this many runs
_chars_always_fit = keys.value_bytes_max // 4  # index values this long fit in any encoding


@dataclass(frozen=True)
class RunRecord:
    """One run as stored: the event, the path taken and the decision (if reached)."""

    run_id: str
    event_id: str
    event_type: str
    workflow_id: str
    workflow_version: int
    state: str  # running | waiting | decided
    event: dict[str, Any]
    # Step dicts; a run the leader writes holds apply's recorded steps (``runner.state.steps``:
    # read-only mappings equal to those dicts, serialized from their JSON kept once)
    path: list[Mapping[str, Any]] = field(default_factory=list)
    decision: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    apps: dict[str, Any] = field(default_factory=dict)  # node id -> the app's answer
    started_ts: int = 0
    updated_ts: int = 0
    offset: int = -1  # log offset of the entry that produced this version of the run

    @property
    def order_id(self) -> str:
        data = self.event.get("data") or {}
        return str(data.get("order_id") or self.event_id)

    @property
    def card(self) -> str | None:
        value = (self.event.get("data") or {}).get("card")
        return None if value is None else str(value)

    @property
    def customer(self) -> str | None:
        value = (self.event.get("data") or {}).get("customer")
        return None if value is None else str(value)

    def index_values(self) -> list[tuple[str, str]]:
        """(kind, value) of each index row: ``order_id``, ``card``, ``customer``, ``event_id``
        (those set)."""
        data = self.event.get("data") or {}
        card, customer = data.get("card"), data.get("customer")
        pairs = (("order", str(data.get("order_id") or self.event_id)),
                 ("card", None if card is None else str(card)),
                 ("customer", None if customer is None else str(customer)),
                 ("event", self.event_id))
        # In bytes, as ``keys.index_prefix`` checks: a value it refuses would fail the whole
        # batch for ever (the API refuses such events; this keeps older logs writable). A
        # character is at most 4 bytes of UTF-8: a short value needs no encoding to know.
        return [(k, v) for k, v in pairs
                if v and "/" not in v and (len(v) <= _chars_always_fit
                                           or len(v.encode()) <= keys.value_bytes_max)]

    def index_keys(self) -> list[bytes]:
        """The keys of the run's index rows (``keys.index_key`` of each ``index_values``)."""
        return keys.index_keys(self.index_values(), self.run_id)

    def to_json(self) -> bytes:
        # orjson serializes a dataclass itself: no deep copy of the event and path (asdict);
        # a recorded step is written as its own JSON, the same bytes as its dict's
        return orjson.dumps(self, default=_step_json)

    @classmethod
    def of_fields(cls, fields: dict[str, Any]) -> RunRecord:
        """``cls(**fields)`` for a dict of every field in the dataclass's order (as
        ``runner.state.views.record_of`` makes it), without the frozen dataclass's
        ``__init__`` (an ``object.__setattr__`` per field: ~1.6 µs of the leader's run-store
        writer per run). The same record, with the same ``__dict__`` (its order is the JSON's);
        any other dict goes through ``__init__``."""
        if tuple(fields) != _FIELDS:
            return cls(**fields)
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        return record

    @classmethod
    def from_json(cls, raw: bytes) -> RunRecord:
        return cls(**orjson.loads(raw))

    def newer_than(self, other: RunRecord | None) -> bool:
        """A write never replaces a later version of the same run (re-driven writes)."""
        return other is None or self.offset >= other.offset


_FIELDS = tuple(RunRecord.__dataclass_fields__)


def _step_json(step: Any) -> orjson.Fragment:
    """A path's recorded step (anything with ``to_json``, as ``runner.state.steps.Step``) as
    the JSON it makes of itself: building its dict and serializing that again was about a
    third of the run-store writer's Python per run."""
    to_json = getattr(step, "to_json", None)
    if to_json is None:
        raise TypeError(f"{type(step).__name__} is not JSON serializable")
    return orjson.Fragment(to_json())


class RunStore(Protocol):
    """Where runs live outside the replicated state. Every method may block on I/O."""

    def put_many(self, runs: list[RunRecord], writer_id: int | None = None) -> None:
        """Write each run's version. ``writer_id``: the leadership term (the replog writer id)
        in which this node produced these versions; within a term a later call carries newer
        versions, and a later term's writes are never hidden by an earlier one's (a deposed
        leader still draining its queue). Stores that compare ``offset`` may ignore it."""
        ...

    def get(self, run_id: str) -> RunRecord | None: ...

    def lookup(self, kind: str, value: str, limit: int = lookup_runs_max) -> list[RunRecord]:
        """Runs whose order id (``kind='order'``), card, customer or event id (``'event'``)
        equals ``value``."""
        ...

    def close(self) -> None: ...


def open_run_store(settings: Settings) -> RunStore:
    """The store the settings ask for (``hbase``, ``rocksdb`` or ``memory``)."""
    kind = settings.effective_run_store
    if kind == "hbase":
        from runner.runstore.hbase import HBaseRunStore

        return HBaseRunStore(settings.hbase_host, settings.hbase_port, settings.hbase_table)
    if kind == "rocksdb":
        from runner.runstore.rocks import RocksRunStore

        return RocksRunStore(settings.node_dir / "runs")
    from runner.runstore.memory import MemoryRunStore

    return MemoryRunStore()
