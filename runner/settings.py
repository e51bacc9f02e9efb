"""Settings of one runner node, read from ``RAILFLOW_*`` environment variables.

With no variables at all, a node runs embedded: file log, single node, RocksDB run store and
local checkpoints, all under ``./.railflow``. ``RAILFLOW_MODE=cluster`` switches to Kafka +
ZooKeeper + HBase + S3/HDFS at the addresses of ``infra.endpoints`` unless overridden.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra import endpoints


class Settings(BaseSettings):
    """One node's configuration; every limit carries its unit last."""

    model_config = SettingsConfigDict(env_prefix="RAILFLOW_", extra="ignore")

    mode: Literal["embedded", "cluster"] = "embedded"
    data_dir: Path = Path(".railflow")
    node_id: str = "node-1"
    host: str = "127.0.0.1"
    port: int = 8000
    advertise_url: str | None = None  # defaults to http://host:port

    # cluster adapters
    zookeeper: str = endpoints.ZOOKEEPER
    kafka_bootstrap: str = endpoints.KAFKA_BOOTSTRAP
    kafka_topic: str = "railflow-log"
    election_path: str = "/railflow/leader"
    session_timeout_s: float = 6.0
    hbase_host: str = endpoints.HBASE_THRIFT_HOST
    hbase_port: int = endpoints.HBASE_THRIFT_PORT
    hbase_table: str = "railflow_runs"
    run_store: Literal["auto", "rocksdb", "hbase", "memory"] = "auto"
    checkpoint_url: str | None = None  # defaults to file://<data_dir>/checkpoints
    checkpoint_every_entries: int = 20_000
    checkpoint_retain: int = 3

    # behaviour
    demo: bool = True  # preload the demo workflow and metrics when the state is empty
    tick_interval_ms: int = 250
    effects_confirm_interval_ms: int = 100
    request_deadline_ms_default: int = 2_000
    request_deadline_ms_max: int = 30_000
    submit_timeout_s: float = 10.0
    app_call_timeout_ms: int = 2_000
    webhook_attempts_max: int = 6
    webhook_backoff_ms_base: int = 200
    webhook_backoff_ms_max: int = 10_000
    # shared secrets; the same on every node of a cluster
    app_secret: str = "railflow-demo-app-secret"
    token_secret: str = "railflow-demo-token-secret"
    api_keys: list[str] = Field(default_factory=list)  # extra client keys (cluster nodes)
    app_urls: dict[str, str] = Field(default_factory=dict)  # app name -> URL of the app
    webhook_secrets: dict[str, str] = Field(default_factory=dict)  # secret_ref -> secret

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
