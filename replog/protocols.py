"""The small interfaces replog drives: the state machine, the log, the election, the forwarder.

Implementations: ``replog.kafka.KafkaLog`` (log, and ``SendingLog``) and
``replog.filelog.FileLog`` (log),
``replog.zk.ZkElection`` and ``replog.single.SingleNodeElection`` (election), the fakes in
``replog.testing`` (simulation), and the runner's state machine and HTTP forwarder.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from replog.entry import Entry
from replog.errors import ReplogError


@runtime_checkable
class SnapshotWriter(Protocol):
    def write(self, dir: pathlib.Path) -> None:
        """Write the captured view as files into ``dir``; runs on a background thread."""


@runtime_checkable
class StateMachine(Protocol):
    """Deterministic state: ``apply`` is a pure function of (state, entry), see ARCHITECTURE §3.

    ``apply`` receives every accepted entry, including replog's own kinds (``replog.*``,
    e.g. ``LeaderStarted``), for which it should return ``[]`` unless it wants to react (e.g.
    re-drive effects after a failover).
    """

    def apply(self, entry: Entry) -> list[Any]: ...

    def snapshot(self) -> SnapshotWriter: ...

    def restore(self, dir: pathlib.Path) -> None: ...

    def digest(self) -> str: ...

    @property
    def applied_offset(self) -> int: ...


class LogReader(Protocol):
    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        """Up to ``records_max`` (offset, bytes) pairs in log order; [] after ``timeout_s``."""

    def seek(self, offset: int) -> None:
        """Read on from ``offset`` (what was fetched before is dropped); undoes ``pause``."""

    def pause(self) -> None:
        """Fetch nothing until the next ``seek`` (a leader reads the log only where it has a
        gap: a reader fetching its own records in the background costs CPU for nothing)."""

    def close(self) -> None: ...


class LogAdapter(Protocol):
    def append(self, records: Sequence[bytes]) -> list[int] | None:
        """Append all records in order and return once they are durable, with the offset each
        took (None when the log cannot say: the leader then reads them back); raise on
        failure.

        One call is one group commit: many requests share one produce-and-flush.
        """

    def open_reader(self, start_offset: int, *, follower: bool = False) -> LogReader:
        """A reader from ``start_offset``; a ``follower``'s may wait a few ms to fetch records
        together (cheaper), a leader's returns each record at once."""
        ...

    def first_offset(self) -> int:
        """The oldest offset the log still holds (a retention policy moves it forward);
        raises when the log cannot be reached now."""
        ...

    def tail_offset(self) -> int:
        """The offset the next append will take: a reader behind it has records to read;
        raises when the log cannot be reached now."""
        ...

    def close(self) -> None: ...


# Called once per sent record, on the thread that polls (``SendingLog.poll_sent``) or that
# replaced the log's client: the offset the record took (-1 when the log cannot say, or on
# failure) and the failure, if any. It must not block and must not take the caller's locks.
OnSent = Callable[[int, ReplogError | None], None]


@runtime_checkable
class SendingLog(Protocol):
    """A log that takes records without waiting for them to be durable (Kafka's produce) and
    reports each one later: a leader hands a record over on the thread that submitted it and
    takes the reports on its apply loop, with no appender thread between."""

    def send(self, record: bytes, on_sent: OnSent) -> None:
        """Hand ``record`` over after every record sent before it (the log keeps their order);
        ``on_sent`` is called once, later, from ``poll_sent``. Raises when the log refuses it
        at once (no report follows then); never waits for the network."""

    def poll_sent(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for reports of sent records and call their ``on_sent`` on
        this thread; returns how many events were served (0 after the timeout)."""


@dataclass(frozen=True)
class Elected:
    """This node leads; ``writer_id`` is its election sequence number."""

    writer_id: int


@dataclass(frozen=True)
class Deposed:
    """This node lost (or may have lost) leadership: stop acknowledging at once."""

    reason: str = ""


ElectionEvent = Elected | Deposed


class Election(Protocol):
    def start(
        self, node_id: str, advertise_url: str, on_event: Callable[[ElectionEvent], None]
    ) -> None:
        """Join the election; ``on_event`` may be called from any thread and must not block."""

    def leader_url(self) -> str | None: ...

    def resign(self) -> None:
        """Leave and rejoin with a new, larger writer id."""

    def stop(self) -> None: ...


class Forwarder(Protocol):
    def forward(self, leader_url: str, kind: str, payload: bytes, timeout_s: float) -> Applied:
        """Submit on the leader and return its ``Applied``; raise a ``ReplogError`` on failure."""


@dataclass(frozen=True)
class Applied:
    """The outcome of an acknowledged entry: where it landed, who wrote it, what apply returned."""

    offset: int
    writer_id: int
    effects: list[Any] = field(default_factory=list)
