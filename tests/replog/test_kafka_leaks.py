"""Kafka consumers left open: ``replog.kafka.open_consumers`` lists every reader and watermark
probe alive and not closed, with the test that opened it, and the suite's check
(``tests/conftest.py``) fails a module that leaves one behind (it would keep connecting to the
broker after the session stopped the cluster). On a dead broker: no cluster needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from replog import kafka
from replog.kafka import KafkaLog

DEAD_BROKER = "127.0.0.1:1"  # nothing listens on port 1
THIS_TEST = "test_kafka_leaks.py::"


def _ours() -> list[str]:
    return [c for c in kafka.open_consumers() if THIS_TEST in c]


def test_a_reader_is_listed_with_its_test_until_it_is_closed():
    log = KafkaLog(DEAD_BROKER, "t-leak", create=False, log_level=0)
    reader = log.open_reader(7)
    try:
        (listed,) = _ours()
        assert listed.startswith("a reader of t-leak at 127.0.0.1:1 from offset 7")
        assert "test_a_reader_is_listed_with_its_test_until_it_is_closed" in listed
    finally:
        reader.close()
    assert _ours() == []
    reader.close()  # a second close does nothing (a node and its log may both close it)
    log.close()


def test_a_probe_is_listed_until_its_log_is_closed_or_it_fails():
    log = KafkaLog(DEAD_BROKER, "t-probe", create=False, log_level=0)
    with pytest.raises(Exception):  # noqa: B017 - whatever the client raises on a dead broker
        log.first_offset(timeout_s=0.3)
    assert _ours() == []  # a probe that failed is closed (made anew next time)
    log._probe = None
    with log._probe_lock:  # a probe made and kept, as after a broker that answered
        from confluent_kafka import Consumer

        log._probe = Consumer({"bootstrap.servers": DEAD_BROKER, "group.id": "g",
                               "log_level": 0})
        kafka._opened(log, "the watermark probe of t-probe")
    assert len(_ours()) == 1
    log.close()
    assert _ours() == []


LEAKY = '''
from replog.kafka import KafkaLog

def test_leaves_a_reader_open():
    {body}
'''


@pytest.mark.parametrize("closes", [False, True])
def test_the_suites_check_fails_a_module_that_leaves_a_reader_open(tmp_path, closes):
    conftest = Path(__file__).resolve().parent.parent / "conftest.py"
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    body = ('r = KafkaLog("127.0.0.1:1", "t-left", create=False, log_level=0).open_reader(0)'
            + ("; r.close()" if closes else "\n    globals()['kept'] = r"))
    (tmp_path / "test_leaky.py").write_text(LEAKY.format(body=body))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("RAILFLOW_REQUIRE_CLUSTER", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(tmp_path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    if closes:
        assert out.returncode == 0, out.stdout + out.stderr
    else:
        assert out.returncode == 1, out.stdout + out.stderr
        assert "Kafka consumers left open" in out.stdout
        assert "a reader of t-left at 127.0.0.1:1 from offset 0, opened by " \
               "test_leaky.py::test_leaves_a_reader_open" in out.stdout
        assert "1 passed, 1 error" in out.stdout
