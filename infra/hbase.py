"""Apache HBase in standalone mode plus its Thrift 1 server (happybase) on 127.0.0.1:9090.

Standalone mode runs master and region server in one JVM with data on local disk. HBase's
launcher always starts its own embedded ZooKeeper in this mode, so it gets a private port
(2182) and the project's ZooKeeper on 2181 stays independent of HBase restarts. The Thrift
server is a second JVM that reaches HBase through that embedded ZooKeeper.
"""

import uuid

from infra import jars, java, paths
from infra.configs import write_hadoop_xml
from infra.endpoints import HBASE_THRIFT_PORT, HOST
from infra.server import OFF_PATH_NICE, Process, Server

ZOOKEEPER_PORT = 2182
MASTER_PORT = 16000
MASTER_INFO_PORT = 16010
REGIONSERVER_PORT = 16020
REGIONSERVER_INFO_PORT = -1  # no region server web UI: one less Jetty to start (the master's stays)
THRIFT_INFO_PORT = 9095
MASTER_HEAP_MB = 1024
THRIFT_HEAP_MB = 384
# A fixed young generation: with the 20 ms pause goal (java.py) G1 kept it at its 51 MB minimum
# and collected every 2-3 s under load, each pause rescanning the memstore's old-to-young cards
# (docs/latency.md, "The cluster's JVMs under load"); with 256 MB it paused half to a
# thirteenth as often, for 44-70 % less pause time, the longest pause longer (off the decision
# path: the log round trip does not wait for the run store).
MASTER_JVM = ["-Xmn256m"]
PROBE_TABLE = b"railflow_infra_probe"
PROBE_TIMEOUT_MS = 5000
# Hadoop brings reload4j; HBase logs through log4j2's 1.2 bridge, and both cannot be loaded.
DROP_JARS = ("reload4j-", "slf4j-reload4j-")


class HBase(Server):
    name = "hbase"
    processes = (
        Process("hbase-master", (ZOOKEEPER_PORT, MASTER_PORT, MASTER_INFO_PORT, REGIONSERVER_PORT),
                stop_grace_s=45, nice=OFF_PATH_NICE),
        Process("hbase-thrift", (HBASE_THRIFT_PORT, THRIFT_INFO_PORT), stop_grace_s=15,
                nice=OFF_PATH_NICE),
    )
    start_timeout_s = 180

    def prepare(self) -> None:
        jars.ensure("hbase")
        conf = paths.conf_dir(self.name)
        data = paths.data_dir(self.name)
        write_hadoop_xml(conf / "hbase-site.xml", {
            "hbase.cluster.distributed": False,
            "hbase.rootdir": f"file://{data / 'root'}",
            "hbase.tmp.dir": data / "tmp",
            "hbase.zookeeper.quorum": HOST,
            "hbase.zookeeper.property.clientPort": ZOOKEEPER_PORT,
            "hbase.zookeeper.property.dataDir": data / "zookeeper",
            "hbase.unsafe.stream.capability.enforce": False,
            "hbase.wal.provider": "filesystem",
            "hbase.master.hostname": HOST,
            "hbase.unsafe.regionserver.hostname": HOST,
            "hbase.master.ipc.address": HOST,
            "hbase.regionserver.ipc.address": HOST,
            "hbase.master.port": MASTER_PORT,
            "hbase.master.info.port": MASTER_INFO_PORT,
            "hbase.master.info.bindAddress": HOST,
            "hbase.regionserver.port": REGIONSERVER_PORT,
            "hbase.regionserver.info.port": REGIONSERVER_INFO_PORT,
            "hbase.regionserver.info.bindAddress": HOST,
            "hbase.thrift.info.bindAddress": HOST,
            "hbase.regionserver.handler.count": 16,
            "hbase.thrift.minWorkerThreads": 8,
            "hbase.master.wait.on.regionservers.mintostart": 1,
            "hbase.master.wait.on.regionservers.timeout": 1000,
            # region server check-in retry period (default 3 s) paces start-up
            "hbase.regionserver.msginterval": 1000,
            "zookeeper.session.timeout": 10000,
            "hbase.client.retries.number": 10,
        })
        (conf / "log4j2.properties").write_text(_LOG4J2)

    def argv(self, process: Process) -> list[str]:
        conf = paths.conf_dir(self.name)
        props = {"log4j2.configurationFile": str(conf / "log4j2.properties"),
                 "hbase.log.dir": str(paths.LOG_DIR),
                 "hbase.home.dir": str(paths.RUN_DIR),
                 "org.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible": "true"}
        cp = jars.classpath("hbase", conf, drop=DROP_JARS)
        if process.name == "hbase-master":
            return java.argv("org.apache.hadoop.hbase.master.HMaster", cp, MASTER_HEAP_MB,
                             props=props, args=["start"], extra_jvm=MASTER_JVM)
        return java.argv("org.apache.hadoop.hbase.thrift.ThriftServer", cp, THRIFT_HEAP_MB,
                         props=props, args=["-b", HOST, "-p", str(HBASE_THRIFT_PORT),
                                            "--infoport", str(THRIFT_INFO_PORT), "start"])

    def probe(self) -> None:
        import happybase

        conn = happybase.Connection(HOST, HBASE_THRIFT_PORT, timeout=PROBE_TIMEOUT_MS,
                                    autoconnect=True)
        try:
            if PROBE_TABLE not in conn.tables():
                conn.create_table(PROBE_TABLE, {"f": {"max_versions": 1}})
            table = conn.table(PROBE_TABLE)
            row, value = uuid.uuid4().hex.encode(), b"ok"
            table.put(row, {b"f:v": value})
            got = table.row(row).get(b"f:v")
            table.delete(row)
            if got != value:
                raise RuntimeError(f"HBase read back {got!r}")
        finally:
            conn.close()


_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{2}: %m%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = WARN
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = WARN
logger.hbase.name = org.apache.hadoop.hbase
logger.hbase.level = INFO
"""
