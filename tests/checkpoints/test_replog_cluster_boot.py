"""On the real cluster: a follower (Kafka log, ZooKeeper election) takes the checkpoints; a new
node boots from the newest one, replays Kafka from the offset after it, and matches the
leader's digest. Runs with every store (local, S3, HDFS)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from checkpoints import CatchUp, Checkpointer, list_offsets, restore_newest
from infra import endpoints
from replog import Node
from replog.kafka import KafkaLog
from replog.testing import ops
from replog.testing.kv import DuckKV
from replog.zk import ZkElection

ENTRIES = 230
EVERY = 50
TIMEOUT_S = 60


def _node(sm, topic: str, zk_path: str, name: str, **kw) -> Node:  # type: ignore[no-untyped-def]
    return Node(
        sm,
        KafkaLog(endpoints.KAFKA_BOOTSTRAP, topic),
        ZkElection(endpoints.ZOOKEEPER, zk_path, session_timeout_s=6.0),
        node_id=name,
        advertise_url=f"http://{name}.invalid",
        **kw,
    )


def _until(predicate, timeout_s: float = TIMEOUT_S) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.cluster
def test_a_follower_checkpoints_and_a_new_node_boots_from_it(store, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:10]
    topic, zk_path = f"railflow-ckpt-test-{run}", f"/railflow-tests/checkpoints/{run}"
    leader_sm, follower_sm = DuckKV(), DuckKV()
    cp = Checkpointer(store, follower_sm, every_entries=EVERY, retain=2, node_id="follower")
    leader = _node(leader_sm, topic, zk_path, "leader")
    leader.start()
    follower = None
    try:
        assert _until(lambda: leader.is_leader)
        follower = _node(follower_sm, topic, zk_path, "follower", checkpointer=cp)
        follower.start()
        futures = [
            leader.submit(ops.KIND, ops.incr(f"k{i % 13}", i), timeout_s=TIMEOUT_S)
            for i in range(ENTRIES)
        ]
        last = max(f.result(timeout=TIMEOUT_S).offset for f in futures)
        assert follower.wait_applied(last, TIMEOUT_S)
        assert not follower.is_leader
        cp.wait(TIMEOUT_S)
    finally:
        if follower is not None:
            follower.stop()
            follower.log.close()
        leader.stop()
        leader.log.close()  # the node does not own its log (nor its watermark probe)
        cp.close()
    assert follower_sm.digest() == leader_sm.digest()
    assert list_offsets(store) and cp.stats.taken >= 1

    booted = DuckKV()
    manifest = restore_newest(store, booted, scratch_root=tmp_path)
    assert manifest is not None and manifest.writer_node == "follower"
    assert manifest.offset == max(list_offsets(store)) and manifest.offset % EVERY == 0
    node = _node(
        booted,
        topic,
        zk_path,
        "booted",
        start_offset=manifest.offset + 1,
        start_writer_id=manifest.writer_id,
    )
    node.start()
    try:
        catch_up = CatchUp(manifest.offset, last, interval_s=0.5)
        assert catch_up.watch(lambda: node.applied_offset, timeout_s=TIMEOUT_S, poll_s=0.02)
    finally:
        node.stop()
        node.log.close()
    assert node.failure is None
    assert booted.digest() == leader_sm.digest()
