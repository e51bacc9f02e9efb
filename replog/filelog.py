"""The embedded log: one append-only file of length-prefixed, checksummed records.

Offsets are record numbers from 0. A torn record at the tail (a crash mid-write) is cut off
when the log is opened. Readers in the same process are woken on append; the file is for one
writer process (the embedded mode has one node). Memory does not grow with the log: the index
keeps the file position of one record in every ``stride`` (``index_every_records`` at first; a
reader opened mid-log seeks to the indexed record before it and skips forward), and once it
holds ``index_entries_max`` positions it keeps every other one and doubles the stride, so a
reader opened on a long log reads past at most one stride (readers open rarely: at start, from
a checkpoint's offset). Readers keep their own position. The file itself is not truncated.
"""

from __future__ import annotations

import os
import pathlib
import struct
import threading
import zlib
from collections.abc import Sequence

from replog.errors import InvariantViolation

_RECORD = struct.Struct(">II")  # length, crc32
record_bytes_max = 16 * 1024 * 1024
index_every_records = 4096  # the first stride: 8 bytes of index per 4096 records
index_entries_max = 4096  # then the stride doubles: the index stays under ~150 KB


def _thin(index: list[int], stride: int) -> tuple[list[int], int]:
    """Keep every other position (records 0, 2*stride, ...) until the index fits."""
    while len(index) > index_entries_max:
        index, stride = index[::2], stride * 2
    return index, stride


def _scan(path: pathlib.Path) -> tuple[list[int], int, int, int]:
    """The sparse index, its stride, the number of valid records and the end of the last."""
    index: list[int] = []
    stride = index_every_records
    count, pos = 0, 0
    with open(path, "rb") as f:
        while True:
            head = f.read(_RECORD.size)
            if len(head) < _RECORD.size:
                break
            length, crc = _RECORD.unpack(head)
            body = f.read(length)
            if length > record_bytes_max or len(body) < length or zlib.crc32(body) != crc:
                break
            if count % stride == 0:
                index.append(pos)
                index, stride = _thin(index, stride)
            count += 1
            pos += _RECORD.size + length
    return index, stride, count, pos


class FileLog:
    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        self.fsync = fsync
        self._index, self._stride, self._count, end = _scan(self.path)
        self._file = open(self.path, "r+b")
        self._file.truncate(end)  # drop a torn tail
        self._file.seek(end)
        self._end = end
        self._cv = threading.Condition()

    @property
    def end_offset(self) -> int:
        return self._count

    def first_offset(self) -> int:
        return 0  # a file log keeps every record

    def tail_offset(self) -> int:
        with self._cv:
            return self._count

    def append(self, records: Sequence[bytes]) -> list[int]:
        with self._cv:
            first = self._count
            pos, count = self._end, self._count
            chunks = []
            indexed = []
            for r in records:
                if len(r) > record_bytes_max:
                    raise ValueError(f"record longer than {record_bytes_max} bytes")
                chunks.append(_RECORD.pack(len(r), zlib.crc32(r)) + r)
                if count % self._stride == 0:
                    indexed.append(pos)
                count += 1
                pos += _RECORD.size + len(r)
            self._file.write(b"".join(chunks))
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
            self._index.extend(indexed)
            self._index, self._stride = _thin(self._index, self._stride)
            self._count = count
            self._end = pos
            self._cv.notify_all()
        return list(range(first, count))

    def open_reader(self, start_offset: int, *, follower: bool = False) -> FileLogReader:
        return FileLogReader(self, start_offset)  # a local file costs nothing to wait on

    def close(self) -> None:
        self._file.close()


class FileLogReader:
    def __init__(self, log: FileLog, start_offset: int):
        self._log = log
        self._file = open(log.path, "rb")
        self.seek(start_offset)

    def seek(self, offset: int) -> None:
        log = self._log
        with log._cv:
            block = min(offset, max(0, log._count - 1)) // log._stride
            self._next = block * log._stride
            self._file.seek(log._index[block] if log._index else 0)
        self._skip_to = offset  # records before it are read past, not returned

    def pause(self) -> None:
        pass  # a file reader reads only when polled

    def poll(self, timeout_s: float, records_max: int) -> list[tuple[int, bytes]]:
        log = self._log
        with log._cv:
            if self._next >= log._count:
                log._cv.wait(timeout_s)
            available = log._count  # appended and flushed: readable through our own handle
        out: list[tuple[int, bytes]] = []
        while self._next < available and len(out) < records_max:
            length, crc = _RECORD.unpack(self._file.read(_RECORD.size))
            body = self._file.read(length)
            if zlib.crc32(body) != crc:
                raise InvariantViolation(f"record {self._next} of {log.path} fails its checksum")
            if self._next >= self._skip_to:
                out.append((self._next, body))
            self._next += 1
        return out

    def close(self) -> None:
        self._file.close()
