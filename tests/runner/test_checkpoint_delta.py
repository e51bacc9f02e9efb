"""Delta checkpoints of the runner's state: a chain restores the same tables and digest as a
full checkpoint at the same offset, with runs resumed, confirmed, evicted and event ids
expired between captures, and with orders applied between a capture and its write."""

from __future__ import annotations

import itertools
import logging
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checkpoints import Checkpointer, restore_newest, store_from_url
from checkpoints.layout import folder_name, manifest_key, part_key
from checkpoints.read import list_offsets, read_manifest
from metrics_engine import Engine
from runner.state import entries, schema
from runner.state.effects import StoreRun
from runner.state.machine import RunnerStateMachine
from tests.checkpoints.helpers import flip_byte
from tests.runner.test_machine import T0, Log, order, reply, review_order, setup_w3

MINUTE = 60_000
HOUR = 60 * MINUTE
SMALL = dict(chunk_bytes_target=2048, segment_bytes_max=8192)  # segments roll: some immutable


def node(tmp_path: Path, name: str) -> RunnerStateMachine:
    return RunnerStateMachine(tmp_path / name, engine=Engine(tmp_path / f"{name}-engine", **SMALL),
                              dedup_retention_ms=HOUR, run_retention_ms=HOUR)


def checkpointer(store, sm, tmp_path: Path, **kw) -> Checkpointer:
    kw.setdefault("retain", 10)
    return Checkpointer(store, sm, every_entries=10**9, scratch_root=tmp_path,
                        background_nice=None, **kw)


def tables(sm: RunnerStateMachine) -> dict[str, list[tuple]]:
    sm.flush()
    return {t: sm.con.execute(f"SELECT * FROM {t} ORDER BY {key}").fetchall()
            for t, (_, key) in schema.TABLES.items()}


def stored(effects: list) -> list[list]:
    return [[e.run["run_id"], e.run["offset"]] for e in effects if isinstance(e, StoreRun)]


class Scenario:
    """Three phases of orders on one log; ``phase(n)`` applies the n-th."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.confirm: list[list] = []
        self.waiting: list[str] = []

    def orders(self, first: int, count: int, ts: int) -> None:
        for i in range(first, first + count):
            o = review_order(f"o-{i}") if i % 5 == 0 else order(f"o-{i}", card=f"c{i % 7}",
                                                                 amount=100 + i)
            effects = self.log.apply(entries.EVENT_RECEIVED, o, ts=ts + i * 100)
            (run,) = reply(effects).runs
            if run["state"] == "waiting":
                self.waiting.append(run["run_id"])
            self.confirm += stored(effects)

    def phase(self, n: int) -> None:
        log = self.log
        if n == 1:
            setup_w3(log)
            self.orders(0, 30, T0)
            log.apply(entries.EFFECTS_DONE, {"stored": self.confirm[:10], "outbox": []},
                      ts=T0 + 4_000)
        elif n == 2:  # a run resumed after its first row; old runs confirmed stored
            run_id = self.waiting.pop(0)
            claim = {"run_id": run_id, "node_id": "review", "user": "ann"}
            assert reply(log.apply(entries.REVIEW_CLAIMED, claim, ts=T0 + 5_000)).ok
            done = log.apply(entries.REVIEW_DECIDED, dict(claim, outcome="accept", override=False),
                             ts=T0 + 5_001)
            self.confirm += stored(done)
            self.orders(30, 20, T0)
            # a task claimed, its run's row unchanged
            claim = {"run_id": self.waiting[0], "node_id": "review", "user": "bob"}
            assert reply(log.apply(entries.REVIEW_CLAIMED, claim, ts=T0 + 8_000)).ok
            log.apply(entries.EFFECTS_DONE, {"stored": self.confirm[10:], "outbox": []},
                      ts=T0 + 9_000)
        else:  # two hours later: the stored finished runs leave, event ids expire
            self.orders(50, 10, T0 + 2 * HOUR)
            log.apply(entries.EFFECTS_DONE, {"stored": self.confirm[-3:], "outbox": []},
                      ts=T0 + 2 * HOUR + 9_000)


@pytest.fixture
def store(tmp_path):
    return store_from_url((tmp_path / "store").as_uri())


def test_a_chain_restores_what_a_full_checkpoint_restores(tmp_path, store):
    a, f = node(tmp_path, "a"), node(tmp_path, "f")  # f: a replica writing full ones only
    full_store = store_from_url((tmp_path / "full").as_uri())
    cp, full_cp = (checkpointer(store, a, tmp_path),
                   checkpointer(full_store, f, tmp_path, full_every=0))
    log = Log(a, f)
    scenario = Scenario(log)
    held, want = [], {}
    try:
        for n in (1, 2, 3, 4):
            if n < 4:
                scenario.phase(n)
            cp.checkpoint(a.applied_offset, 1)
            full_cp.checkpoint(f.applied_offset, 1)
            at = a.applied_offset
            want[at] = (tables(a), a.digest())
            if n == 3:  # orders applied between a capture and its write: in the next one only
                scenario.orders(60, 5, T0 + 2 * HOUR)
            cp.wait()
            full_cp.wait()
            held.append(len(want[at][0]["runs"]))
    finally:
        cp.close()
        full_cp.close()
    offsets = sorted(list_offsets(store))
    assert offsets == sorted(want)
    manifests = [read_manifest(store, o) for o in offsets]
    assert [m.chain for m in manifests] == [tuple(offsets[:i]) for i in range(4)]
    assert all(not read_manifest(full_store, o).chain for o in offsets)
    assert held[2] < held[1], "no run evicted in phase 3: a weak test"
    assert any(p.folder is not None for p in manifests[2].parts), "no segment referenced"
    assert manifests[2].uploaded_bytes < manifests[2].total_bytes
    # a delta holds the runs changed since its base, not every run held
    runs_part = next(p for p in manifests[3].parts if p.path.endswith("/runs.parquet"))
    dumped = pq.read_table(tmp_path / "store" / part_key(offsets[3], runs_part.path))
    assert 0 < dumped.num_rows <= 5 < held[3]

    for offset in offsets:  # each link of the chain alone, against a full one
        for src, dst, kept in (("store", "chain", offsets), ("full", "one", [offset])):
            for o in kept:
                if o <= offset:
                    shutil.copytree(tmp_path / src / folder_name(o),
                                    tmp_path / f"{dst}-{offset}" / folder_name(o))
        chain_store, one_full = (store_from_url((tmp_path / f"{n}-{offset}").as_uri())
                                 for n in ("chain", "one"))
        b, c = node(tmp_path, f"b{offset}"), node(tmp_path, f"c{offset}")
        try:
            assert restore_newest(chain_store, b).offset == offset
            assert restore_newest(one_full, c).offset == offset
            assert b.digest() == c.digest() == want[offset][1]
            assert tables(b) == tables(c) == want[offset][0]
        finally:
            b.close()
            c.close()

    b = node(tmp_path, "b")
    try:  # the restored node replays the log after it and goes on like the one that wrote it
        restore_newest(store, b)
        for entry in log.history:
            if entry.offset > b.applied_offset:
                b.apply(entry)
        more = Log(a, b)
        more.offsets = itertools.count(a.applied_offset + 1)
        Scenario(more).orders(70, 5, T0 + 2 * HOUR)
        assert a.digest() == b.digest()
    finally:
        for m in (a, b, f):
            m.close()


def test_a_node_restored_mid_chain_writes_the_next_delta(tmp_path, store):
    a = node(tmp_path, "a")
    cp = checkpointer(store, a, tmp_path)
    log = Log(a)
    scenario = Scenario(log)
    for n in (1, 2):
        scenario.phase(n)
        cp.checkpoint(a.applied_offset, 1)
        cp.wait()
    b = node(tmp_path, "b")
    restored = restore_newest(store, b)
    assert restored.chain, "restored a full checkpoint: a weak test"
    log.machines = (a, b)
    scenario.phase(3)
    b_cp = checkpointer(store, b, tmp_path)
    try:
        b_cp.checkpoint(b.applied_offset, 1)
        written = b_cp.wait()
        assert written.chain == (*restored.chain, restored.offset)
        cp.checkpoint(a.applied_offset, 1)
        assert cp.wait() is None and cp.stats.digest_mismatches == 0  # b's, and equal
        c = node(tmp_path, "c")
        assert restore_newest(store, c).offset == a.applied_offset
        assert c.digest() == a.digest() and tables(c) == tables(a)
        c.close()
    finally:
        cp.close()
        b_cp.close()
        a.close()
        b.close()


def test_a_broken_chain_and_every_kth_write_are_full(tmp_path, store):
    a = node(tmp_path, "a")
    cp = checkpointer(store, a, tmp_path, full_every=2)
    log = Log(a)
    setup_w3(log)
    chains = []
    try:
        for i in range(6):
            if i == 4:  # the base's manifest is damaged: its chain is broken
                flip_byte(store, manifest_key(cp.stats.last_offset), tmp_path)
            Scenario(log).orders(10 * i, 4, T0)
            cp.checkpoint(a.applied_offset, 1)
            chains.append(len(cp.wait().chain))
    finally:
        cp.close()
        a.close()
    assert chains == [0, 1, 2, 0, 0, 1]


def test_a_corrupt_delta_part_is_named_and_the_base_restored(tmp_path, store, caplog):
    a = node(tmp_path, "a")
    cp = checkpointer(store, a, tmp_path)
    scenario = Scenario(Log(a))
    written = []
    try:
        for n in (1, 2):
            scenario.phase(n)
            cp.checkpoint(a.applied_offset, 1)
            written.append(cp.wait())
    finally:
        cp.close()
        a.close()
    delta = written[1]
    part = next(p for p in delta.parts if p.path.endswith("/runs.parquet"))
    assert part.folder is None
    flip_byte(store, part_key(delta.offset, part.path), tmp_path, position=100)
    b = node(tmp_path, "b")
    with caplog.at_level(logging.WARNING):
        assert restore_newest(store, b).offset == written[0].offset
    b.close()
    assert f"skipping checkpoint {delta.offset}" in caplog.text
    assert "runs.parquet sha256" in caplog.text


def test_the_keys_are_cut_at_the_capture_while_the_flusher_lags(tmp_path, store):
    """Orders applied after a capture but before the flusher reached it belong to the next
    delta, not to this one."""
    a = node(tmp_path, "a")
    cp = checkpointer(store, a, tmp_path)
    scenario = Scenario(Log(a))
    try:
        scenario.phase(1)
        cp.checkpoint(a.applied_offset, 1)
        cp.wait()
        scenario.orders(30, 10, T0)
        gate = threading.Event()
        a._buffer.when_landed(lambda: gate.wait(60))  # the flusher waits behind these rows
        cp.checkpoint(a.applied_offset, 1)  # its view and its cut queue behind the gate
        at, digest = a.applied_offset, a.digest()
        scenario.orders(40, 10, T0)  # absorbed while the flusher waits
        gate.set()
        assert cp.wait().chain and cp.stats.last_offset == at
        cp.checkpoint(a.applied_offset, 1)
        assert cp.wait().chain
        b = node(tmp_path, "b")
        assert restore_newest(store, b).offset == a.applied_offset
        assert b.digest() == a.digest() and tables(b) == tables(a)
        b.close()
        c = node(tmp_path, "c")
        store.delete_file(manifest_key(a.applied_offset))
        assert restore_newest(store, c).offset == at and c.digest() == digest
        c.close()
    finally:
        cp.close()
        a.close()
