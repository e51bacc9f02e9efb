"""The election of the embedded mode: one node, always the leader, with writer id 1."""

from __future__ import annotations

from collections.abc import Callable

from replog.protocols import Deposed, Elected, ElectionEvent


class SingleNodeElection:
    def __init__(self, writer_id: int = 1):
        self._writer_id = writer_id
        self._url: str | None = None
        self._on_event: Callable[[ElectionEvent], None] | None = None

    def start(
        self, node_id: str, advertise_url: str, on_event: Callable[[ElectionEvent], None]
    ) -> None:
        self._url = advertise_url
        self._on_event = on_event
        on_event(Elected(self._writer_id))

    def leader_url(self) -> str | None:
        return self._url

    def resign(self) -> None:
        # Only reached if the log holds a larger writer id (e.g. a log copied from a cluster):
        # take an id above every one seen so far.
        self._writer_id += 1_000_000
        if self._on_event is not None:
            self._on_event(Elected(self._writer_id))

    def stop(self) -> None:
        if self._on_event is not None:
            self._on_event(Deposed("stopped"))
            self._on_event = None
