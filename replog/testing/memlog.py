"""In-process fakes for threaded tests of ``Node``: a shared in-memory log and an election
whose outcome the test decides. Not for production: nothing is durable."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from replog.entry import Entry
from replog.errors import AppendFailed
from replog.protocols import Applied, Deposed, Elected, ElectionEvent


class MemLog:
    def __init__(self) -> None:
        self.records: list[bytes] = []
        self._cv = threading.Condition()
        self.fail_appends = False
        self.held_writers: set[int] = set()  # their appends wait, like a paused leader's
        self.frozen_appends: dict[int, int] = {}  # writer id -> appends waiting in hold
        self.start = 0  # offsets below were deleted, as by a retention policy

    def first_offset(self) -> int:
        return self.start

    def tail_offset(self) -> int:
        with self._cv:
            return len(self.records)

    def hold(self, writer_id: int) -> None:
        with self._cv:
            self.held_writers.add(writer_id)

    def release(self, writer_id: int) -> None:
        with self._cv:
            self.held_writers.discard(writer_id)
            self._cv.notify_all()

    def append(self, records: Sequence[bytes]) -> list[int]:
        if self.fail_appends:
            raise AppendFailed("injected")
        writer_id = Entry.decode(records[0]).writer_id if records else None
        with self._cv:
            if writer_id in self.held_writers:
                self.frozen_appends[writer_id] = self.frozen_appends.get(writer_id, 0) + 1
                self._cv.wait_for(lambda: writer_id not in self.held_writers)
                self.frozen_appends[writer_id] -= 1
            first = len(self.records)
            self.records.extend(records)
            self._cv.notify_all()
        return list(range(first, first + len(records)))

    def open_reader(self, start_offset: int, *, follower: bool = False) -> MemLogReader:
        reader = MemLogReader(self, start_offset)
        reader.follower = follower  # what a test may check
        return reader

    def close(self) -> None:
        pass


class MemLogReader:
    def __init__(self, log: MemLog, start_offset: int):
        self._log, self._next = log, start_offset
        self.paused = False  # what a test may check
        self.records_read = 0

    def seek(self, offset: int) -> None:
        self._next, self.paused = offset, False

    def pause(self) -> None:
        self.paused = True

    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        log = self._log
        with log._cv:
            if self.paused:  # fetches nothing, as a paused Kafka reader
                log._cv.wait(timeout_s)
                return []
            if self._next >= len(log.records):
                log._cv.wait(timeout_s)
            chunk = log.records[self._next : self._next + records_max]
        out = [(self._next + i, r) for i, r in enumerate(chunk)]
        self._next += len(chunk)
        self.records_read += len(chunk)
        return out

    def close(self) -> None:
        pass


class ManualElection:
    """The test calls ``elect`` / ``depose``; ``directory`` maps node urls to who leads."""

    def __init__(self, directory: dict[str, str | None]):
        self.directory = directory
        self._on_event: Callable[[ElectionEvent], None] | None = None
        self.url = ""

    def start(
        self, node_id: str, advertise_url: str, on_event: Callable[[ElectionEvent], None]
    ) -> None:
        self.url, self._on_event = advertise_url, on_event

    def elect(self, writer_id: int) -> None:
        self.directory["leader"] = self.url
        assert self._on_event is not None
        self._on_event(Elected(writer_id))

    def depose(self, reason: str = "test") -> None:
        assert self._on_event is not None
        self._on_event(Deposed(reason))

    def leader_url(self) -> str | None:
        return self.directory.get("leader")

    def resign(self) -> None:
        pass

    def stop(self) -> None:
        pass


class DirectForwarder:
    """Forwards by calling the leader ``Node`` in the same process."""

    def __init__(self, nodes_by_url: dict):
        self.nodes_by_url = nodes_by_url

    def forward(self, leader_url: str, kind: str, payload: bytes, timeout_s: float) -> Applied:
        return self.nodes_by_url[leader_url].submit(kind, payload, timeout_s).result(timeout_s + 1)
