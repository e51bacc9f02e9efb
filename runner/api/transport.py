"""uvicorn's httptools protocol with each answer's head and body in one ``write``.

uvicorn writes an answer's head (``http.response.start``) and its body apart: two ``send``
syscalls and two TCP segments per order, about a tenth of the HTTP thread's CPU. Here the
connection's transport holds a write back until the next one or, at the latest, the end of the
event loop's current iteration (``call_soon``), so a head and the body sent right after it
leave together, and a head alone (a HEAD request, a streamed body that takes its time) leaves
one iteration later. Pass ``HttpToolsProtocol`` as uvicorn's ``http``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base


class HeldWriteTransport:
    """A transport whose every other write waits for the one after it (see the module).
    Closing or ending the stream writes what is held first; the rest is the wrapped one's."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            self._transport.write(held + data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpToolsProtocol(_Base):
    """uvicorn's ``HttpToolsProtocol`` writing through a ``HeldWriteTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeldWriteTransport(transport, self.loop))  # type: ignore[arg-type]
