"""Project-wide pytest fixtures: the real local cluster, for tests marked ``cluster``.

Every test marked ``@pytest.mark.cluster`` gets the session-scoped cluster without asking for
it: if the cluster already runs it is used as is, otherwise it is started (``infra.cluster.up``)
and, at the end of the session, only what this session started is stopped (set
``RAILFLOW_KEEP_CLUSTER=1`` to leave it running). Tests may also request ``cluster`` to get the
endpoints module. Nothing here starts a JVM unless a cluster test runs, so
``pytest -m "not cluster"`` stays fast. With ``RAILFLOW_REQUIRE_CLUSTER=1`` (set by
``make test``) a skipped cluster test fails the run.

After each test module, no Kafka consumer made by ``replog.kafka`` (a log reader, a log's
watermark probe) may be left alive and open: one left keeps connecting to the broker after
the session stopped the cluster. The module's last test then errors, naming the test that
opened it, and the consumer is closed so that the next modules are checked on their own.
"""

from __future__ import annotations

import gc
import os
import sys
from types import ModuleType

import pytest

_skipped_cluster_tests: list[str] = []


@pytest.fixture(scope="session")
def _railflow_cluster() -> ModuleType:
    from infra import cluster as infra_cluster
    from infra import endpoints

    lines: list[str] = []
    reports = infra_cluster.up(log=lines.append)
    started = [r.name for r in reports if r.action == "started"]
    failed = [r for r in reports if r.action == "failed"]
    if failed:
        infra_cluster.down(started, log=lines.append)
        pytest.fail("local cluster did not come up:\n" + "\n".join(lines), pytrace=False)
    yield endpoints
    if started and os.environ.get("RAILFLOW_KEEP_CLUSTER") != "1":
        infra_cluster.down(started, log=lambda _msg: None)


@pytest.fixture(scope="session")
def cluster(_railflow_cluster: ModuleType) -> ModuleType:
    """The running local cluster; returns ``infra.endpoints`` (hosts, ports, S3 keys)."""
    return _railflow_cluster


@pytest.fixture(autouse=True, scope="module")
def _no_kafka_consumer_left_open():
    yield
    kafka = sys.modules.get("replog.kafka")
    if kafka is None:  # nothing in this module made a Kafka client
        return
    gc.collect()  # garbage is not a leak: what is still alive now is held by something
    left = kafka.open_consumers()
    if left:
        kafka.close_open_consumers()
        pytest.fail("Kafka consumers left open (close the reader, or the KafkaLog of each "
                    "node stopped):\n  " + "\n  ".join(left), pytrace=False)


@pytest.fixture(autouse=True)
def _cluster_for_marked_tests(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("cluster") is not None:
        request.getfixturevalue("_railflow_cluster")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "cluster" in report.keywords:
        _skipped_cluster_tests.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_cluster_tests and os.environ.get("RAILFLOW_REQUIRE_CLUSTER") == "1":
        print(f"\n{len(_skipped_cluster_tests)} cluster test(s) were skipped; "
              "RAILFLOW_REQUIRE_CLUSTER=1 forbids that:")
        for nodeid in _skipped_cluster_tests:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
