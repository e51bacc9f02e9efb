"""The ``java`` command line shared by every JVM server: Java 17 module openings, heap, GC.

Sizing is for a shared 2-core, 24 GiB machine: small fixed heaps (``-Xms`` = ``-Xmx`` so RSS is
predictable), G1 with a short pause goal, and few GC / compiler threads so six JVMs starting
together do not starve each other.
"""

import functools
import re
import shutil
import subprocess

from infra import paths
from infra.errors import InfraError

JAVA_VERSION_MIN = 17

# Hadoop, HBase and Kafka still reach into JDK internals; Java 17 denies that unless opened.
ADD_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in ("java.lang", "java.lang.reflect", "java.lang.invoke", "java.io", "java.net",
                "java.nio", "java.util", "java.util.concurrent",
                "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
                "sun.util.calendar", "jdk.internal.misc", "jdk.internal.ref")
] + ["--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
     "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED"]


@functools.cache
def java_bin() -> str:
    """The ``java`` on PATH, checked once to be at least Java 17 (Kafka 4 needs it)."""
    java = shutil.which("java")
    if java is None:
        raise InfraError(f"`java` not found: install a JDK >= {JAVA_VERSION_MIN} "
                         "(apt-get install openjdk-17-jdk-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    match = re.search(r'version "(\d+)', out)
    if match is None or int(match.group(1)) < JAVA_VERSION_MIN:
        raise InfraError(f"{java} is not Java >= {JAVA_VERSION_MIN}: {out.strip()[:200]}")
    return java


def argv(main: str, classpath: str, heap_mb: int, props: dict[str, str] | None = None,
         args: list[str] | None = None, extra_jvm: list[str] | None = None) -> list[str]:
    """``java <flags> -cp <classpath> <main> <args>`` for one server. Its collections go to
    ``<logs>/<main class>-gc.log`` with wall-clock times, to set a pause beside a latency."""
    gc_log = paths.LOG_DIR / f"{main.rsplit('.', 1)[-1].lower()}-gc.log"
    flags = [
        f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:ParallelGCThreads=2",
        "-XX:ConcGCThreads=1", "-XX:CICompilerCount=2", "-XX:+ExitOnOutOfMemoryError",
        f"-Xlog:gc,gc+cpu:file={gc_log}:time,uptime:filecount=2,filesize=16m",
        "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true",
        *ADD_OPENS,
    ]
    flags += [f"-D{k}={v}" for k, v in (props or {}).items()]
    flags += extra_jvm or []
    return [java_bin(), *flags, "-cp", classpath, main, *(args or [])]
