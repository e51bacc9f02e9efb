"""Apache Hadoop HDFS: one NameNode (RPC 8020, WebHDFS 9870) and one DataNode, on 127.0.0.1.

Single replica, permissions off, safe mode left as soon as the NameNode starts, 1 s
DataNode heartbeats. The DataNode registers as 127.0.0.1 so WebHDFS redirects stay local.
"""

import subprocess
import uuid

from infra import jars, java, paths
from infra.configs import write_hadoop_xml
from infra.endpoints import HDFS_NAMENODE_RPC, HOST, WEBHDFS_URL
from infra.errors import InfraError
from infra.server import OFF_PATH_NICE, Process, Server

NAMENODE_RPC_PORT = int(HDFS_NAMENODE_RPC.rsplit(":", 1)[1])
NAMENODE_HTTP_PORT = int(WEBHDFS_URL.rsplit(":", 1)[1])
DATANODE_PORT = 9866
DATANODE_HTTP_PORT = 9864
DATANODE_IPC_PORT = 9867
NAMENODE_HEAP_MB = 512
DATANODE_HEAP_MB = 384
FORMAT_TIMEOUT_S = 120
PROBE_TIMEOUT_S = 5.0
USER = "railflow"


class Hdfs(Server):
    name = "hdfs"
    processes = (
        Process("hdfs-namenode", (NAMENODE_RPC_PORT, NAMENODE_HTTP_PORT), stop_grace_s=20,
                nice=OFF_PATH_NICE),
        Process("hdfs-datanode", (DATANODE_PORT, DATANODE_HTTP_PORT, DATANODE_IPC_PORT),
                stop_grace_s=20, nice=OFF_PATH_NICE),
    )
    start_timeout_s = 120

    def prepare(self) -> None:
        jars.ensure("hdfs")
        conf = paths.conf_dir(self.name)
        data = paths.data_dir(self.name)
        write_hadoop_xml(conf / "core-site.xml", {
            "fs.defaultFS": HDFS_NAMENODE_RPC,
            "hadoop.tmp.dir": data / "tmp",
            "hadoop.security.authentication": "simple",
            "hadoop.http.staticuser.user": USER,
            f"hadoop.proxyuser.{USER}.hosts": "*",
            f"hadoop.proxyuser.{USER}.groups": "*",
        })
        write_hadoop_xml(conf / "hdfs-site.xml", {
            "dfs.namenode.name.dir": f"file://{data / 'name'}",
            "dfs.datanode.data.dir": f"file://{data / 'data'}",
            "dfs.replication": 1,
            "dfs.permissions.enabled": False,
            "dfs.webhdfs.enabled": True,
            "dfs.namenode.rpc-address": f"{HOST}:{NAMENODE_RPC_PORT}",
            "dfs.namenode.http-address": f"{HOST}:{NAMENODE_HTTP_PORT}",
            "dfs.namenode.secondary.http-address": f"{HOST}:0",
            "dfs.datanode.address": f"{HOST}:{DATANODE_PORT}",
            "dfs.datanode.http.address": f"{HOST}:{DATANODE_HTTP_PORT}",
            "dfs.datanode.ipc.address": f"{HOST}:{DATANODE_IPC_PORT}",
            "dfs.datanode.hostname": HOST,
            "dfs.namenode.datanode.registration.ip-hostname-check": False,
            "dfs.namenode.safemode.extension": 0,
            "dfs.namenode.safemode.min.datanodes": 0,
            "dfs.heartbeat.interval": 1,
            "dfs.namenode.heartbeat.recheck-interval": 5000,
            "dfs.namenode.handler.count": 8,
            "dfs.datanode.handler.count": 4,
            "dfs.blocksize": 32 * 1024 * 1024,
        })
        (conf / "log4j.properties").write_text(_LOG4J)
        # The web UIs' resource folders ship in Hadoop's tarball, not in its Maven jars; the
        # HTTP servers (which host WebHDFS) refuse to start without them on the classpath.
        for app in ("hdfs", "datanode", "secondary", "static"):
            web_inf = conf / "webapps" / app / "WEB-INF"
            web_inf.mkdir(parents=True, exist_ok=True)
            (web_inf / "web.xml").write_text(_WEB_XML)
        if not (data / "name" / "current" / "VERSION").exists():
            argv = java.argv("org.apache.hadoop.hdfs.server.namenode.NameNode",
                             jars.classpath("hdfs", conf), 256, props=self._props(),
                             args=["-format", "-nonInteractive", "-clusterId", "railflow"])
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S)
            if proc.returncode != 0:
                raise InfraError(f"namenode -format failed:\n{proc.stdout[-3000:]}"
                                 f"{proc.stderr[-3000:]}")

    def _props(self) -> dict[str, str]:
        return {"hadoop.log.dir": str(paths.LOG_DIR), "hadoop.home.dir": str(paths.RUN_DIR),
                "hadoop.root.logger": "INFO,console", "user.name": USER,
                "HADOOP_USER_NAME": USER}

    def env(self, process: Process) -> dict[str, str]:
        return {"HADOOP_USER_NAME": USER}

    def argv(self, process: Process) -> list[str]:
        conf = paths.conf_dir(self.name)
        main, heap = {
            "hdfs-namenode": ("org.apache.hadoop.hdfs.server.namenode.NameNode", NAMENODE_HEAP_MB),
            "hdfs-datanode": ("org.apache.hadoop.hdfs.server.datanode.DataNode", DATANODE_HEAP_MB),
        }[process.name]
        return java.argv(main, jars.classpath("hdfs", conf), heap, props=self._props())

    def probe(self) -> None:
        import requests

        path = f"/tmp/railflow-infra/probe-{uuid.uuid4().hex}"
        url = f"{WEBHDFS_URL}/webhdfs/v1{path}"
        body = b"railflow-probe"
        r = requests.put(url, params={"op": "CREATE", "overwrite": "true", "user.name": USER},
                         allow_redirects=False, timeout=PROBE_TIMEOUT_S)
        if r.status_code != 307:
            raise RuntimeError(f"CREATE step 1: HTTP {r.status_code} {r.text[:300]}")
        r = requests.put(r.headers["Location"], data=body, timeout=PROBE_TIMEOUT_S)
        if r.status_code != 201:
            raise RuntimeError(f"CREATE step 2: HTTP {r.status_code} {r.text[:300]}")
        r = requests.get(url, params={"op": "OPEN", "user.name": USER}, timeout=PROBE_TIMEOUT_S)
        if r.status_code != 200 or r.content != body:
            raise RuntimeError(f"OPEN: HTTP {r.status_code} {r.content[:100]!r}")
        requests.delete(url, params={"op": "DELETE", "user.name": USER}, timeout=PROBE_TIMEOUT_S)


_WEB_XML = """<?xml version="1.0"?>
<web-app xmlns="http://xmlns.jcp.org/xml/ns/javaee" version="3.1"/>
"""

_LOG4J = """hadoop.root.logger=INFO,console
log4j.rootLogger=${hadoop.root.logger}
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""
