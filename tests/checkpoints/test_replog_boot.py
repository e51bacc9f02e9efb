"""A replog node checkpoints from its apply loop; a new node boots from the newest checkpoint,
replays only the log after it, and reaches the same digest (embedded file log; the store is
local, or S3 / HDFS on the cluster)."""

from __future__ import annotations

import logging
from pathlib import Path

from checkpoints import CatchUp, Checkpointer, list_offsets, read_manifest, restore_newest
from replog import Entry, Node
from replog.filelog import FileLog
from replog.single import SingleNodeElection
from replog.testing import ops
from replog.testing.dictkv import DictKV
from replog.testing.kv import DuckKV

ENTRIES = 230
EVERY = 50
TIMEOUT_S = 60


class CountingKV(DuckKV):
    def __init__(self) -> None:
        super().__init__()
        self.applies = 0

    def apply(self, entry):  # type: ignore[no-untyped-def]
        self.applies += 1
        return super().apply(entry)


def _replayed_digest(log_path: Path, upto: int) -> str:
    kv = DictKV()
    reader = FileLog(log_path).open_reader(0)
    for _ in range(upto + 10):  # bounded: each poll returns at least one record here
        if kv.applied_offset >= upto:
            break
        for offset, data in reader.poll(1.0, 1000):
            if offset <= upto:
                kv.apply(Entry.decode(data, offset))
    reader.close()
    return kv.digest()


def _node(sm, path: Path, **kw) -> Node:  # type: ignore[no-untyped-def]
    return Node(sm, FileLog(path), SingleNodeElection(), node_id="n", advertise_url="x", **kw)


def test_a_node_boots_from_a_checkpoint_and_catches_up(store, tmp_path: Path, caplog) -> None:
    log_path = tmp_path / "log"
    first = CountingKV()
    cp = Checkpointer(store, first, every_entries=EVERY, retain=2, node_id="first")
    node = _node(first, log_path, checkpointer=cp)
    node.start()
    try:
        futures = [
            node.submit(ops.KIND, ops.incr(f"k{i % 17}", i), timeout_s=TIMEOUT_S)
            for i in range(ENTRIES)
        ]
        last = max(f.result(timeout=TIMEOUT_S).offset for f in futures)
        assert node.wait_applied(last, TIMEOUT_S)
        cp.wait(TIMEOUT_S)
    finally:
        node.stop()
        cp.close()
    source_digest = first.digest()
    offsets = list_offsets(store)
    assert 1 <= len(offsets) <= 2 and max(offsets) % EVERY == 0 and cp.stats.taken >= 1

    second = CountingKV()
    manifest = restore_newest(store, second, scratch_root=tmp_path)
    assert manifest is not None and manifest.offset == max(offsets)
    assert second.applied_offset == manifest.offset
    assert manifest.digest == read_manifest(store, manifest.offset).digest
    reborn = _node(
        second,
        log_path,
        start_offset=manifest.offset + 1,
        start_writer_id=manifest.writer_id,
    )
    reborn.start()
    try:
        with caplog.at_level(logging.INFO, logger="checkpoints"):
            catch_up = CatchUp(manifest.offset, last, interval_s=0.0)
            assert catch_up.watch(lambda: reborn.applied_offset, timeout_s=TIMEOUT_S, poll_s=0.01)
    finally:
        reborn.stop()
    assert reborn.failure is None
    assert second.digest() == source_digest
    # Only the tail after the checkpoint was replayed (plus the reborn leader's own
    # LeaderStarted entry, if it landed before stop).
    assert last - manifest.offset <= second.applies <= last - manifest.offset + 1
    # The checkpoint's digest is the state's digest at exactly that offset: replay to it.
    assert manifest.digest == _replayed_digest(log_path, manifest.offset)
    assert any("catching up" in r.message for r in caplog.records)
