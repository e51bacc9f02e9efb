"""The log entry envelope and its versioned binary serialization.

An entry is what the leader appends and every node applies: ``writer_id`` (the leader's
election sequence number, used for fencing), ``seq`` (the writer's own counter, used to drop
duplicates and to match an applied entry to the request waiting for it), ``ts`` (epoch ms,
stamped by the leader), ``kind`` and an opaque ``payload``. The offset comes from the log, not
from the bytes. Kinds starting with ``replog.`` are reserved for the log itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from replog.errors import InvariantViolation

FORMAT_VERSION = 1
KIND_LEADER_STARTED = "replog.LeaderStarted"
RESERVED_PREFIX = "replog."

kind_bytes_max = 255
payload_bytes_max = 8 * 1024 * 1024

# version:u8, writer_id:i64, seq:i64, ts:i64, kind_len:u8, then kind, then payload.
_HEADER = struct.Struct(">BqqqB")


@dataclass(frozen=True, slots=True)
class Entry:
    offset: int
    writer_id: int
    ts: int
    kind: str
    payload: bytes
    seq: int = 0

    def encode(self) -> bytes:
        kind = self.kind.encode()
        if len(kind) > kind_bytes_max:
            raise ValueError(f"kind longer than {kind_bytes_max} bytes")
        if len(self.payload) > payload_bytes_max:
            raise ValueError(f"payload longer than {payload_bytes_max} bytes")
        header = _HEADER.pack(FORMAT_VERSION, self.writer_id, self.seq, self.ts, len(kind))
        return header + kind + bytes(self.payload)

    @staticmethod
    def decode(data: bytes, offset: int = -1) -> Entry:
        if len(data) < _HEADER.size:
            raise InvariantViolation(f"entry at offset {offset} is {len(data)} bytes: truncated")
        version, writer_id, seq, ts, kind_len = _HEADER.unpack_from(data)
        if version != FORMAT_VERSION:
            raise InvariantViolation(f"entry at offset {offset} has unknown version {version}")
        start = _HEADER.size
        kind = bytes(data[start : start + kind_len]).decode()
        payload = bytes(data[start + kind_len :])
        return Entry(offset, writer_id, ts, kind, payload, seq)


def leader_started_payload(writer_id: int) -> bytes:
    return struct.pack(">q", writer_id)
