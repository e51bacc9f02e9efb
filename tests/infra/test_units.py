"""infra/ without servers: config writers, jar-cache digests, PID tracking, server selection."""

import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from infra import cluster, configs, jars, paths, procs
from infra.errors import InfraError
from infra.spark import _artifact


def test_properties_and_hadoop_xml(tmp_path):
    configs.write_properties(tmp_path / "a.properties", {"x.y": 1, "flag": True, "s": "v"})
    lines = (tmp_path / "a.properties").read_text().splitlines()
    assert lines[1:] == ["x.y=1", "flag=true", "s=v"]
    configs.write_hadoop_xml(tmp_path / "site.xml", {"a<b": "c&d", "on": False})
    props = {p.findtext("name"): p.findtext("value")
             for p in ET.parse(tmp_path / "site.xml").getroot()}
    assert props == {"a<b": "c&d", "on": "false"}


def test_jar_digest_changes_only_for_the_edited_profile(tmp_path, monkeypatch):
    pom = tmp_path / "pom.xml"
    shutil.copy(jars.POM, pom)
    monkeypatch.setattr(jars, "POM", pom)
    before = {p: jars._digest(p) for p in jars.PROFILES}
    text = pom.read_text()
    pom.write_text(text.replace("<version>${kafka.version}</version>",
                                "<version>9.9.9</version>", 1))
    after = {p: jars._digest(p) for p in jars.PROFILES}
    assert {p for p in jars.PROFILES if before[p] != after[p]} == {"kafka"}
    with pytest.raises(InfraError):
        jars._digest("no-such-profile")


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "PID_DIR", tmp_path / "pids")
    monkeypatch.setattr(paths, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setattr(paths, "JARS_DIR", tmp_path / "jars")
    monkeypatch.setattr(paths, "CONF_DIR", tmp_path / "conf")
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    return tmp_path


def test_start_track_and_stop_a_process_by_pid(run_dir):
    argv = [sys.executable, "-c", "import time; print('hello', flush=True); time.sleep(60)"]
    pid = procs.start("sleeper", argv)
    assert procs.pid_of("sleeper") == pid
    assert procs.rss_bytes(pid) > 0
    assert procs.stop("sleeper", grace_s=10) is True
    assert procs.pid_of("sleeper") is None
    assert not (run_dir / "pids" / "sleeper.pid").exists()
    assert "sleeper" in (run_dir / "logs" / "sleeper.log").read_text()
    assert procs.stop("sleeper", grace_s=1) is False


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(run_dir):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    procs.start("stubborn", [sys.executable, "-c", code])
    log = run_dir / "logs" / "stubborn.log"
    for _ in range(100):  # wait until the handler is installed
        if "ready" in log.read_text():
            break
        subprocess.run(["sleep", "0.05"])
    assert procs.stop("stubborn", grace_s=0.5) is True
    assert procs.pid_of("stubborn") is None


def test_a_recycled_pid_is_not_mistaken_for_ours(run_dir):
    paths.PID_DIR.mkdir(parents=True)
    # our own PID, but with a start time that cannot be ours
    (paths.PID_DIR / "ghost.pid").write_text(f"{__import__('os').getpid()} 1\n")
    assert procs.pid_of("ghost") is None
    assert not (paths.PID_DIR / "ghost.pid").exists()


def test_a_niced_process_runs_at_that_level_under_its_own_pid(run_dir):
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    pid = procs.start("low", argv, nice=7)
    try:
        assert procs.pid_of("low") == pid
        comm = Path(f"/proc/{pid}/comm")
        for _ in range(500):  # until nice(1) has set the level and exec'd the server
            if comm.read_text().strip() != "nice":
                break
            time.sleep(0.01)
        assert comm.read_text().strip().startswith("python")
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) + 7
    finally:
        procs.stop("low", grace_s=10)


def test_only_servers_off_the_order_path_are_niced():
    niced = {p.name for s in cluster.SERVERS for p in s.processes if p.nice}
    assert niced == {"hbase-master", "hbase-thrift", "hdfs-namenode", "hdfs-datanode",
                     "seaweedfs"}


def test_select_rejects_unknown_servers():
    assert [s.name for s in cluster.select(["kafka", "zookeeper"])] == ["kafka", "zookeeper"]
    assert len(cluster.select(None)) == len(cluster.SERVERS)
    with pytest.raises(InfraError):
        cluster.select(["kafak"])


def test_every_port_is_owned_by_one_process_only():
    ports = [p for s in cluster.SERVERS for p in s.ports()]
    assert len(ports) == len(set(ports))


def test_artifact_names_ignore_versions():
    assert _artifact("hadoop-client-api-3.5.0.jar") == "hadoop-client-api"
    assert _artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert _artifact("commons-pool2-2.12.0.jar") == "commons-pool2"
