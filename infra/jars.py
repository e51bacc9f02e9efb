"""JVM jars of each server, resolved from Maven Central through ``infra/pom.xml``.

``classpath(profile)`` returns the jars of one pom profile, running
``mvn dependency:copy-dependencies`` only when the cache for that profile is missing. The
cache lives in ``~/.cache/railflow/jars/<profile>/<digest>/``, where the digest covers the
pom's properties, build section and that profile only: editing one profile re-fetches that
profile alone, into a new folder, so servers running from the old jars are not disturbed.
It is shared by every clone; a lock keeps two ``up`` runs from fetching into it at once.
"""

import fcntl
import hashlib
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from infra import paths
from infra.errors import InfraError

POM = Path(__file__).with_name("pom.xml")
PROFILES = ("zookeeper", "kafka", "hdfs", "hbase", "spark")
MARKER = ".railflow-complete"
FETCH_TIMEOUT_S = 1800


_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _digest(profile: str) -> str:
    root = ET.parse(POM).getroot()
    parts = [root.find("m:properties", _NS), root.find("m:build", _NS)]
    parts += [p for p in root.iterfind("m:profiles/m:profile", _NS)
              if p.findtext("m:id", namespaces=_NS) == profile]
    if len(parts) != 3 or any(p is None for p in parts):
        raise InfraError(f"infra/pom.xml has no profile {profile!r}")
    blob = b"".join(ET.tostring(p) for p in parts)
    return hashlib.sha256(blob).hexdigest()[:12]


def profile_dir(profile: str) -> Path:
    return paths.JARS_DIR / profile / _digest(profile)


def is_cached(profile: str) -> bool:
    return (profile_dir(profile) / MARKER).exists()


def ensure(profile: str) -> tuple[Path, float]:
    """Make sure the profile's jars are cached; returns (dir, seconds spent fetching)."""
    if profile not in PROFILES:
        raise InfraError(f"unknown jar profile {profile!r}; known: {PROFILES}")
    paths.JARS_DIR.mkdir(parents=True, exist_ok=True)
    if is_cached(profile):
        return profile_dir(profile), 0.0
    with open(paths.JARS_DIR / f".{profile}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_cached(profile):  # another process fetched it while we waited
            return profile_dir(profile), 0.0
        return profile_dir(profile), _fetch(profile)


def _fetch(profile: str) -> float:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InfraError("`mvn` not found: install Maven 3.8+ (apt-get install maven)")
    target = profile_dir(profile)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    started = time.monotonic()
    cmd = [mvn, "-q", "-B", "-f", str(POM), "-P", profile, "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    print(f"fetching {profile} jars from Maven Central ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    if proc.returncode != 0:
        raise InfraError(f"mvn failed for profile {profile}:\n{proc.stdout[-3000:]}"
                         f"{proc.stderr[-3000:]}")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return time.monotonic() - started


def jar_files(profile: str, drop: tuple[str, ...] = ()) -> list[Path]:
    """The profile's jars, minus those whose file name starts with one of ``drop``."""
    directory, _ = ensure(profile)
    jars = sorted(j for j in directory.glob("*.jar") if not j.name.startswith(drop))
    if not jars:
        raise InfraError(f"no jars in {directory}; delete it and run `python -m infra up` again")
    return jars


def classpath(profile: str, *extra_first: Path, drop: tuple[str, ...] = ()) -> str:
    """A ``-cp`` value: the given config dirs first (so their XML wins), then the jars."""
    return ":".join([str(p) for p in extra_first]
                    + [str(j) for j in jar_files(profile, drop)])
