"""Store URLs, and the catch-up progress report."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from checkpoints import CatchUp, store_from_url
from checkpoints.stores.local import LocalStore
from checkpoints.stores.s3 import S3Store
from checkpoints.stores.webhdfs import WebHdfsStore


def test_file_url(tmp_path: Path) -> None:
    s = store_from_url(tmp_path.as_uri())
    assert isinstance(s, LocalStore) and s.root == tmp_path.resolve()


def test_s3_url() -> None:
    s = store_from_url("s3://bkt/a/b?endpoint=http://127.0.0.1:8333&region=eu-west-1")
    assert isinstance(s, S3Store)
    assert (s.bucket, s.prefix) == ("bkt", "a/b")
    assert s._client.meta.endpoint_url == "http://127.0.0.1:8333"
    assert s._client.meta.region_name == "eu-west-1"


def test_webhdfs_url() -> None:
    s = store_from_url("webhdfs://127.0.0.1:9870/ckpt/x?user=rf&datanode_host=127.0.0.1")
    assert isinstance(s, WebHdfsStore)
    assert (s.base_url, s.root, s.user) == ("http://127.0.0.1:9870", "/ckpt/x", "rf")
    assert s._datanode("http://dn.internal:9864/webhdfs/v1/x?op=CREATE") == (
        "http://127.0.0.1:9864/webhdfs/v1/x?op=CREATE"
    )


@pytest.mark.parametrize("url", ["ftp://x/y", "s3:///nobucket", "file://otherhost/x"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        store_from_url(url)


def test_catch_up_reports_rate_eta_and_done(caplog) -> None:
    now = [0.0]
    c = CatchUp(start_offset=100, target_offset=1100, interval_s=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="checkpoints"):
        now[0] = 2.0
        p = c.update(300)
        assert p.rate_per_s == pytest.approx(100.0) and p.eta_s == pytest.approx(8.0)
        assert p.fraction == pytest.approx(0.2)
        now[0] = 2.5
        c.update(350)  # within interval_s of the last line: not logged
        now[0] = 10.0
        assert c.done(1100) and c.update(1100).fraction == 1.0
    lines = [r.message for r in caplog.records if "catching up" in r.message]
    assert len(lines) == 2 and "applied 300 of 1100 (20.0%)" in lines[0]


def test_catch_up_watch_times_out_when_stuck() -> None:
    now = [0.0]

    def tick() -> float:
        now[0] += 0.5
        return now[0]

    c = CatchUp(0, 10, clock=tick)
    assert c.watch(lambda: 3, timeout_s=2.0, poll_s=0) is False
    assert CatchUp(0, 10, clock=tick).watch(lambda: 10, timeout_s=2.0) is True


def test_cli_lists_verifies_and_prunes(tmp_path: Path, capsys) -> None:
    from checkpoints import Checkpointer
    from checkpoints.__main__ import main
    from checkpoints.layout import folder_name, part_key

    from .helpers import BlobStateMachine, flip_byte, part_keys

    store = LocalStore(tmp_path / "s")
    sm = BlobStateMachine()
    for offset in (3, 4, 5):
        sm.set(offset, "s.bin", b"state %d" % offset)
        cp = Checkpointer(store, sm, every_entries=10, retain=5, node_id="n1")
        cp.checkpoint(offset, writer_id=2).result(timeout=60)
        cp.close()
    store.put_bytes(part_key(9, "parts-x/s.bin"), b"partial")
    assert main(["ls", store.url]) == 0
    out = capsys.readouterr().out
    assert "not a checkpoint: no MANIFEST.json" in out and out.count(" n1") == 3
    flip_byte(store, part_keys(store, 5)[0], tmp_path)
    assert main(["verify", store.url, "--offset", "5"]) == 1
    assert main(["verify", store.url]) == 0  # the newest valid one is 4
    assert "4: ok" in capsys.readouterr().out
    assert main(["prune", store.url, "--retain", "1"]) == 0
    assert list_offsets_of(store) == [folder_name(9), folder_name(5)]


def list_offsets_of(store: LocalStore) -> list[str]:
    return sorted(store.list_dirs(), reverse=True)
