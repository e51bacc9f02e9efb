"""Apache ZooKeeper, one standalone server on 127.0.0.1:2181.

Tuned for tests: ``tickTime`` 500 ms lets clients ask for sessions from 1 s (election and
fencing tests expire sessions in 2-4 s instead of the default 6-40 s). The admin HTTP server
is off (it would take port 8080).
"""

import logging
import uuid

from infra import jars, java, paths
from infra.configs import write_properties
from infra.endpoints import HOST, ZOOKEEPER
from infra.server import Process, Server

PORT = int(ZOOKEEPER.rsplit(":", 1)[1])
HEAP_MB = 256
TICK_TIME_MS = 500
SESSION_TIMEOUT_MIN_MS = 1000
SESSION_TIMEOUT_MAX_MS = 30000
PROBE_TIMEOUT_S = 3.0
_quiet = logging.getLogger("infra.zookeeper.probe")  # kazoo's retry chatter while starting
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class ZooKeeper(Server):
    name = "zookeeper"
    processes = (Process("zookeeper", (PORT,), stop_grace_s=15),)
    start_timeout_s = 60

    def prepare(self) -> None:
        jars.ensure("zookeeper")
        conf = paths.conf_dir(self.name)
        write_properties(conf / "zoo.cfg", {
            "tickTime": TICK_TIME_MS,
            "initLimit": 10,
            "syncLimit": 5,
            "dataDir": paths.data_dir(self.name),
            "clientPort": PORT,
            "clientPortAddress": HOST,
            "minSessionTimeout": SESSION_TIMEOUT_MIN_MS,
            "maxSessionTimeout": SESSION_TIMEOUT_MAX_MS,
            "maxClientCnxns": 0,
            "admin.enableServer": False,
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr",
            "autopurge.purgeInterval": 1,
            "autopurge.snapRetainCount": 3,
        })
        (conf / "logback.xml").write_text(_LOGBACK)

    def argv(self, process: Process) -> list[str]:
        conf = paths.conf_dir(self.name)
        return java.argv(
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            jars.classpath("zookeeper", conf), HEAP_MB,
            props={"logback.configurationFile": str(conf / "logback.xml"),
                   "zookeeper.jmx.log4j.disable": "true"},
            args=[str(conf / "zoo.cfg")])

    def probe(self) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=ZOOKEEPER, timeout=PROBE_TIMEOUT_S, logger=_quiet)
        zk.start(timeout=PROBE_TIMEOUT_S)
        try:
            path = f"/railflow-infra/probe-{uuid.uuid4().hex}"
            zk.create(path, b"ok", ephemeral=True, makepath=True)
            value, _ = zk.get(path)
            zk.delete(path)
            if value != b"ok":
                raise RuntimeError(f"znode read back {value!r}")
        finally:
            zk.stop()
            zk.close()


_LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""
