"""In-process fakes for threaded tests of ``Node``: a shared in-memory log and an election
whose outcome the test decides. Not for production: nothing is durable.

``MemLog`` writes both ways a real log does: ``append`` (a group commit that returns the
offsets) and ``send`` + ``poll_sent`` (``replog.protocols.SendingLog``, as Kafka's produce and
delivery reports: a record lands at once unless its writer is held, and its report waits for
a ``poll_sent``). Reports are one queue for every node on the log; each callback reaches its
own node whichever node's loop served it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from replog.entry import Entry
from replog.errors import AppendFailed, AppendTimeout, ReplogError
from replog.protocols import Applied, Deposed, Elected, ElectionEvent, OnSent


class MemLog:
    def __init__(self) -> None:
        self.records: list[bytes] = []
        self._cv = threading.Condition()
        self.fail_appends = False  # appends raise; sent records are reported failed
        self.refuse_sends = False  # ``send`` raises at once, as a producer whose queue is full
        self.lose_reports = False  # sent records land but are reported failed (a timeout)
        self.hold_reports = False  # reports wait until ``release_reports``
        self.report_order: Callable[[list], list] | None = None  # reorders a poll's reports
        self.held_writers: set[int] = set()  # their appends wait, like a paused leader's
        self.frozen_appends: dict[int, int] = {}  # writer id -> appends waiting in hold
        self.start = 0  # offsets below were deleted, as by a retention policy
        self._reports: list[tuple[OnSent, int, ReplogError | None]] = []
        self._queued: dict[int, list[tuple[bytes, OnSent]]] = {}  # held writers' sent records

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
            for record, on_sent in self._queued.pop(writer_id, []):  # in the order sent
                self.frozen_appends[writer_id] -= 1
                self._land(record, on_sent)
            self._cv.notify_all()

    def release_reports(self) -> None:
        with self._cv:
            self.hold_reports = False
            self._cv.notify_all()

    def send(self, record: bytes, on_sent: OnSent) -> None:
        if self.refuse_sends:
            raise BufferError("injected: queue full")
        writer_id = Entry.decode(record).writer_id
        with self._cv:
            if self.fail_appends:
                self._reports.append((on_sent, -1, AppendFailed("injected")))
            elif writer_id in self.held_writers or self._queued.get(writer_id):
                self._queued.setdefault(writer_id, []).append((record, on_sent))
                self.frozen_appends[writer_id] = self.frozen_appends.get(writer_id, 0) + 1
            else:
                self._land(record, on_sent)
            self._cv.notify_all()

    def _land(self, record: bytes, on_sent: OnSent) -> None:
        self.records.append(record)
        if self.lose_reports:
            self._reports.append((on_sent, -1, AppendTimeout("injected: no acknowledgement")))
        else:
            self._reports.append((on_sent, len(self.records) - 1, None))

    def poll_sent(self, timeout_s: float) -> int:
        with self._cv:
            if not self._reports or self.hold_reports:
                self._cv.wait(timeout_s)
            if self.hold_reports or not self._reports:
                return 0
            reports, self._reports = self._reports, []
        if self.report_order is not None:
            reports = self.report_order(reports)
        for on_sent, offset, error in reports:  # on this thread, as Kafka's callbacks
            on_sent(offset, error)
        return len(reports)

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
