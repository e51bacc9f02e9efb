"""Settings of one runner node, read from ``RAILFLOW_*`` environment variables.

With no variables at all, a node runs embedded: file log, single node, RocksDB run store and
local checkpoints, all under ``./.railflow``. ``RAILFLOW_MODE=cluster`` switches to Kafka +
ZooKeeper + HBase + S3/HDFS at the addresses of ``infra.endpoints`` unless overridden, and
refuses to start while any shared secret (``RAILFLOW_APP_SECRET``, ``RAILFLOW_TOKEN_SECRET``,
``RAILFLOW_CLUSTER_SECRET``) is a built-in default or shorter than ``secret_chars_min``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra import endpoints

DEMO_SECRETS = {
    "app_secret": "railflow-demo-app-secret",
    "token_secret": "railflow-demo-token-secret",
    "cluster_secret": "railflow-demo-cluster-secret",
}
secret_chars_min = 24
# A follower's checkpoint write at P1's rate is a few hundred ms of CPU (bench/checkpoint_write.py)
# and at most a few seconds of wall time on a busy machine; a checkpoint falls due every ~20 s at
# 1,000 orders/s, so the leader's write, delayed this long, still ends well before the next one.
LEADER_WRITE_DELAY_S = 6.0


class Settings(BaseSettings):
    """One node's configuration; every limit carries its unit last."""

    model_config = SettingsConfigDict(env_prefix="RAILFLOW_", extra="ignore")

    mode: Literal["embedded", "cluster"] = "embedded"
    data_dir: Path = Path(".railflow")
    node_id: str = "node-1"
    host: str = "127.0.0.1"
    port: int = 8000
    advertise_url: str | None = None  # defaults to http://host:port
    # The HTTP server (docs/http-server.md says why the default); the hot path serves orders
    # and app callbacks without FastAPI (``runner.api.hot``; off only to measure its gain).
    # native: the Rust front end of ``runner.api.native`` on the public address, uvicorn
    # behind it on a Unix socket for every other route.
    server: Literal["uvicorn", "granian", "native"] = "native"
    native_http_threads: int = Field(default=1, ge=1, le=64)  # the native front's runtime
    # How an order reaches Python there: batches taken by one Python thread, or a call on the
    # runtime's thread that read it (docs/http-server.md).
    native_http_handoff: Literal["batch", "direct"] = "direct"
    # An idle keep-alive connection is closed this long after its last answer (uvicorn's
    # ``timeout_keep_alive``, whose default it is; the native front closes it alike).
    http_keep_alive_s: int = Field(default=5, ge=1, le=3600)
    hot_path: bool = True
    # How long a Python thread holding the GIL runs before a waiting one may take it
    # (``runner.gcpolicy``). CPython's 5 ms: 0.5 ms cost apply ~10-25 us more CPU per order
    # (bench/apply_cost.py --serving-gc, the flusher and apply contending) and did not lower
    # the full P1 run's tail (docs/latency.md).
    gil_switch_ms: float = Field(default=5.0, gt=0, le=100)
    # The cyclic collector of a serving process (``runner.gcpolicy``): freeze what survives a
    # young collection, and collect the whole heap every ``gc_full_every_s`` (0: never).
    gc_freeze_survivors: bool = True
    gc_full_every_s: float = Field(default=900.0, ge=0)
    # A canary thread's period (``runner.gilwatch``): how late a thread gets to run Python.
    # 0: off.
    gil_watch_ms: float = Field(default=0.0, ge=0, le=1000)
    # Under uvicorn, orders are served below ASGI (``runner.api.transport``): no task, no
    # receive/send per order. Off only to measure the gain.
    lean_orders: bool = True

    # cluster adapters
    zookeeper: str = endpoints.ZOOKEEPER
    kafka_bootstrap: str = endpoints.KAFKA_BOOTSTRAP
    kafka_topic: str = "railflow-log"
    # How the leader writes to Kafka: inline, each record produced on the thread that
    # submitted it and the delivery reports taken by the apply loop; thread, an appender
    # thread between them with one group commit per batch (kept to measure against). The
    # embedded file log always has its appender: its append syncs.
    kafka_append: Literal["inline", "thread"] = "inline"
    election_path: str = "/railflow/leader"
    session_timeout_s: float = 6.0
    hbase_host: str = endpoints.HBASE_THRIFT_HOST
    hbase_port: int = endpoints.HBASE_THRIFT_PORT
    hbase_table: str = "railflow_runs"
    run_store: Literal["auto", "rocksdb", "hbase", "memory"] = "auto"
    checkpoint_url: str | None = None  # defaults to file://<data_dir>/checkpoints
    checkpoint_every_entries: int = 20_000
    checkpoint_retain: int = 3
    # The nice level of the checkpoint's thread (its write, hashing and upload); None leaves
    # it at the node's. It yields the cores to the order path, but a niced thread that holds
    # the GIL when preempted makes every other thread of the node wait for it.
    checkpoint_nice: int | None = 10
    # How long after a capture this node waits before it writes (``checkpoints.Checkpointer``):
    # give each node of a cluster a different delay, a few seconds apart, and the first one
    # writes while the others find its checkpoint and only compare digests.
    checkpoint_write_delay_s: float = 0.0
    # How much longer the leader waits than that (None: LEADER_WRITE_DELAY_S in cluster mode,
    # 0 for an embedded node, which has no one to wait for). The leader is the node whose CPU
    # the orders wait on; by then a follower has usually written the checkpoint, and the
    # leader only computes its digest and compares (``checkpoint_write_delay``).
    checkpoint_leader_write_delay_s: float | None = None
    # Where in each span of log offsets this node hands its rows to DuckDB
    # (``runner.state.buffer.handoff_entries``), 0 to 1; None: from the node id. Nodes sharing
    # cores flush at different moments when their phases differ.
    flush_phase: float | None = Field(default=None, ge=0, lt=1)
    # How long a checkpoint's capture may wait for this node's next hand-off of rows to DuckDB
    # instead of forcing one at the checkpoint's offset, where every replica captures; 0: it
    # forces one. Off by default: a follower then checks whether another node wrote the
    # checkpoint before its own view is ready, so both followers dumped it (docs/latency.md).
    checkpoint_capture_wait_s: float = Field(default=0.0, ge=0, le=60)
    # Delta checkpoints between two full ones (``checkpoints.chain``; 0: every one full).
    checkpoint_full_every: int = Field(default=30, ge=0, le=1000)
    # The log's size retention is derived from these (replog.kafka.retention_bytes_for): it
    # always holds every entry after the oldest kept checkpoint. Larger entries are refused.
    log_entry_bytes_max: int = 1024 * 1024

    # behaviour
    demo: bool = True  # preload the demo workflow and metrics when the state is empty
    # an event id sent again within this much log time is a duplicate (same runs); memory holds
    # one id per event in the window (runner.state.machine.DEDUP_RETENTION_MS_DEFAULT)
    dedup_retention_ms: int = Field(default=3_600_000, ge=60_000)
    # A decided run leaves the hot state (DuckDB) once the run store holds it, it was decided
    # this much log time ago and its event id left the dedup window (runner.state.retention).
    # Then GET /v1/runs/{id} and the console's run page read it from the run store (RocksDB /
    # HBase); the console's run listing, hits per edge and backtest see only runs still held;
    # review queues and runs still waiting are never removed. docs/state-machine.md.
    run_retention_ms: int = Field(default=3_600_000, ge=0)
    demo_scorer: bool | None = None  # serve POST /demo/score; default: embedded demo mode only
    tick_interval_ms: int = 250
    effects_confirm_interval_ms: int = 100
    request_deadline_ms_default: int = 2_000
    request_deadline_ms_max: int = 30_000
    submit_timeout_s: float = 10.0
    app_call_timeout_ms: int = 2_000
    webhook_attempts_max: int = 6
    webhook_backoff_ms_base: int = 200
    webhook_backoff_ms_max: int = 10_000
    # shared secrets; the same on every node of a cluster, never the defaults in cluster mode
    app_secret: str = DEMO_SECRETS["app_secret"]  # signs app calls and their callbacks
    token_secret: str = DEMO_SECRETS["token_secret"]  # signs console tokens
    token_secrets_previous: list[str] = Field(default_factory=list)  # still verified: rotation
    cluster_secret: str = DEMO_SECRETS["cluster_secret"]  # forwarding, checkpoint manifests
    api_keys: list[str] = Field(default_factory=list)  # extra client keys (cluster nodes)
    app_urls: dict[str, str] = Field(default_factory=dict)  # app name -> URL of the app
    app_secrets: dict[str, str] = Field(default_factory=dict)  # app name -> its own secret
    webhook_secrets: dict[str, str] = Field(default_factory=dict)  # secret_ref -> secret
    # Webhook and app URLs must be under one of these (runner.egress); none by default.
    allowed_url_prefixes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _no_default_secrets_in_cluster(self) -> Settings:
        if self.mode == "cluster":
            weak = [name for name, default in DEMO_SECRETS.items()
                    if getattr(self, name) == default or len(getattr(self, name))
                    < secret_chars_min]
            if weak:
                names = ", ".join(f"RAILFLOW_{n.upper()}" for n in weak)
                raise ValueError(f"cluster mode refuses default or short secrets: set {names} "
                                 f"(at least {secret_chars_min} characters, the same on every "
                                 "node)")
        from runner.egress import url_allowed

        refused = [f"{app}={url}" for app, url in sorted(self.app_urls.items())
                   if not url_allowed(url, self.allowed_url_prefixes)]
        if refused:
            raise ValueError(f"RAILFLOW_APP_URLS outside RAILFLOW_ALLOWED_URL_PREFIXES: {refused}")
        return self

    def resolved_cluster_secret(self) -> str:
        """The cluster secret; an embedded node with the default one uses a random secret of
        its own kept in the data directory (nothing to configure, nothing guessable)."""
        if self.cluster_secret != DEMO_SECRETS["cluster_secret"]:
            return self.cluster_secret
        path = self.data_dir / "cluster-secret"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(secrets.token_urlsafe(32))
            tmp.chmod(0o600)
            tmp.replace(path)
        return path.read_text().strip()

    def checkpoint_key(self) -> bytes:
        """Signs and verifies checkpoint manifests (derived: never the forwarding key itself)."""
        return hmac.new(self.resolved_cluster_secret().encode(), b"railflow checkpoint manifest",
                        hashlib.sha256).digest()

    def checkpoint_write_delay(self, is_leader: bool) -> float:
        """How long after a capture a node in this role waits before it writes."""
        if not is_leader:
            return self.checkpoint_write_delay_s
        extra = self.checkpoint_leader_write_delay_s
        if extra is None:
            extra = LEADER_WRITE_DELAY_S if self.mode == "cluster" else 0.0
        return self.checkpoint_write_delay_s + extra

    @property
    def effective_flush_phase(self) -> float:
        if self.flush_phase is not None:
            return self.flush_phase
        return zlib.crc32(self.node_id.encode()) / 2**32

    @property
    def demo_scorer_enabled(self) -> bool:
        if self.demo_scorer is not None:
            return self.demo_scorer
        return self.mode == "embedded" and self.demo

    @property
    def url(self) -> str:
        return self.advertise_url or f"http://{self.host}:{self.port}"

    @property
    def effective_run_store(self) -> str:
        if self.run_store != "auto":
            return self.run_store
        return "hbase" if self.mode == "cluster" else "rocksdb"

    @property
    def effective_checkpoint_url(self) -> str:
        if self.checkpoint_url:
            return self.checkpoint_url
        if self.mode == "cluster":  # shared by the nodes of one log: any may bootstrap from it
            return endpoints.s3_checkpoint_url("railflow-checkpoints", self.kafka_topic)
        return f"file://{(self.data_dir / self.node_id / 'checkpoints').resolve()}"

    @property
    def node_dir(self) -> Path:
        return self.data_dir / self.node_id
