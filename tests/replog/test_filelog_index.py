"""The embedded file log's position index stays within ``index_entries_max`` however long the
log grows, and readers still start at any offset (also after reopening the file)."""

from __future__ import annotations

import pytest

from replog import filelog
from replog.filelog import FileLog


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_the_index_stays_bounded_and_readers_start_anywhere(tmp_path, monkeypatch, batch):
    monkeypatch.setattr(filelog, "index_every_records", 3)
    monkeypatch.setattr(filelog, "index_entries_max", 4)
    log = FileLog(tmp_path / "log", fsync=False)
    records = [f"r{i}".encode() for i in range(200)]
    for at in range(0, len(records), batch):
        log.append(records[at:at + batch])
        assert len(log._index) <= 4
    assert log.end_offset == 200 and log._stride > 3  # the stride grew instead of the index
    for start in (0, 1, 47, 96, 150, 199, 200):
        reader = log.open_reader(start)
        assert reader.poll(0.0, 1000) == [(i, records[i]) for i in range(start, 200)]
        reader.close()
    index, stride = list(log._index), log._stride
    log.close()
    again = FileLog(tmp_path / "log", fsync=False)  # rebuilt by the scan, the same
    assert (again._index, again._stride) == (index, stride)
    again.append([b"more"])
    reader = again.open_reader(190)
    assert [o for o, _ in reader.poll(0.0, 100)] == list(range(190, 201))
    reader.close()
    again.close()


def test_the_file_log_says_where_it_starts_and_ends(tmp_path):
    log = FileLog(tmp_path / "log", fsync=False)
    assert (log.first_offset(), log.tail_offset()) == (0, 0)
    log.append([b"a", b"b", b"c"])
    assert (log.first_offset(), log.tail_offset()) == (0, 3)
    log.close()
    again = FileLog(tmp_path / "log", fsync=False)
    assert again.tail_offset() == 3
    again.close()
