"""The ``railflow`` command line: ``serve``, ``demo traffic``, ``cluster up|down|status``."""

from __future__ import annotations

import secrets
from pathlib import Path

import typer
from rich.console import Console

from runner import gcpolicy

app = typer.Typer(help="Railflow: a fraud decision service.", no_args_is_help=True)
cluster_app = typer.Typer(help="The real local cluster from infra/.", no_args_is_help=True)
demo_app = typer.Typer(help="Demo helpers.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(demo_app, name="demo")
from pipeline.cli import app as pipeline_app  # noqa: E402 - imports no pyspark until a job runs

app.add_typer(pipeline_app, name="pipeline")
console = Console()
DEMO_KEY_FILE = Path(".railflow/demo-api-key")

CURL = ("curl -s -X POST {url}/v1/events -H \"Authorization: Bearer $(cat {key_file})\" "
        "-H 'content-type: application/json' -d '{{\"event_id\":\"o-1\",\"type\":\"order\","
        "\"data\":{{\"card\":\"c1\",\"customer\":\"u1\",\"merchant\":\"m1\",\"country\":\"US\","
        "\"channel\":\"card-not-present\",\"amount\":12500,\"currency\":\"USD\"}}}}'")


def _secret_file(path: Path, make) -> str:
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def demo_credentials(data_dir: Path, auth) -> tuple[str, str, Path]:
    """The demo client key and console password, created once under the data directory."""
    key_file = data_dir / "demo-api-key"
    key = _secret_file(key_file, lambda: "rk_" + secrets.token_urlsafe(24))
    if auth.client_for_key(key) is None:
        auth.create_key("demo", key)
    password = _secret_file(data_dir / "demo-console-password", lambda: secrets.token_urlsafe(12))
    if not auth.has_user("demo"):
        auth.create_user("demo", password, "admin")
    return key, password, key_file


@app.command()
def serve(
    host: str = typer.Option(None, help="Address to bind (RAILFLOW_HOST)."),
    port: int = typer.Option(None, help="Port of the API and console (RAILFLOW_PORT)."),
    node_id: str = typer.Option(None, help="Node id (RAILFLOW_NODE_ID)."),
    log_level: str = typer.Option("warning", help="HTTP server log level."),
    server: str = typer.Option(None, "--server", "--http",
                               help="uvicorn, granian or native (RAILFLOW_SERVER)."),
) -> None:
    """Start a node. With no settings: embedded (file log, single node, RocksDB run store,
    local checkpoints under ./.railflow), preloaded with the W3 demo workflow and W1 metrics."""
    from runner.service import Service
    from runner.settings import Settings

    overrides = {k: v for k, v in (("host", host), ("port", port), ("node_id", node_id),
                                   ("server", server)) if v is not None}
    settings = Settings(**overrides)
    gcpolicy.for_serving(settings.gil_switch_ms, freeze_survivors=settings.gc_freeze_survivors,
                         full_every=settings.gc_full_every_s)
    service = Service(settings)
    key, password, key_file = demo_credentials(settings.data_dir, service.auth)
    url = settings.url
    console.print(f"[bold green]Railflow[/] {settings.mode} node {settings.node_id} serving on "
                  f"{url}  (API docs: {url}/docs)")
    console.print(f"  demo client API key : {key}   (written to {key_file})")
    console.print(f"  demo console user   : demo / {password}   (role admin)")
    from runner.api.console_static import DIST

    if (DIST / "index.html").is_file():
        console.print(f"  console             : {url}/console   (sign in as demo / {password})")
    else:
        console.print("  console             : not built (needs Node 20 and npm: `make console`); "
                      "the API serves without it")
    console.print("  try:")
    console.print("    " + CURL.format(url=url, key_file=key_file), soft_wrap=True, markup=False)
    _serve_http(service, settings, overrides, log_level)


def _serve_http(service, settings, overrides: dict, log_level: str) -> None:
    """Serve the node's API on one event loop: uvicorn (httptools, uvloop) in this process,
    the native front end with uvicorn behind it (``runner.api.native``), or granian's Rust
    HTTP server with one worker process that builds the node from the environment (so the
    options given here travel as ``RAILFLOW_*`` variables)."""
    if settings.server == "native":
        from runner.api.native import serve_native

        serve_native(service, settings, log_level)
        return
    if settings.server == "granian":
        import os

        from granian import Granian
        from granian.constants import Interfaces, Loops

        os.environ.update({f"RAILFLOW_{k.upper()}": str(v) for k, v in overrides.items()})
        Granian("runner.api.app:app_from_env", factory=True, address=settings.host,
                port=settings.port, interface=Interfaces.ASGI, workers=1, loop=Loops.uvloop,
                websockets=False, log_level=log_level, log_access=False).serve()
        return
    import uvicorn

    from runner.api.app import create_app
    from runner.api.transport import HttpToolsProtocol

    # No proxy in front of a node: no proxy-headers middleware, and no Server/Date headers to
    # format for every answer. httptools, each answer's head and body in one write.
    uvicorn.run(create_app(service, on_started=gcpolicy.settle), host=settings.host,
                port=settings.port, http=HttpToolsProtocol, loop="uvloop", log_level=log_level,
                access_log=False, proxy_headers=False, server_header=False, date_header=False,
                timeout_keep_alive=settings.http_keep_alive_s)


@demo_app.command("traffic")
def demo_traffic(
    rate: float = typer.Option(50.0, help="Orders per second."),
    duration: float = typer.Option(30.0, help="Seconds to run (0: until interrupted)."),
    url: str = typer.Option("http://127.0.0.1:8000", help="Node to send to."),
    key_file: Path = typer.Option(DEMO_KEY_FILE, help="API key file."),  # noqa: B008
    seed: int = typer.Option(7, help="Seed of the synthetic orders."),
) -> None:
    """Send synthetic orders at a fixed rate and print a summary of the decisions."""
    from runner.traffic import run_traffic

    summary = run_traffic(url, key_file.read_text().strip(), rate, duration, seed)
    console.print(summary)


@cluster_app.command("up")
def cluster_up() -> None:
    """Fetch, start and health-check every server of the local cluster."""
    from infra.cli import main

    raise typer.Exit(main(["up"]))


@cluster_app.command("down")
def cluster_down() -> None:
    """Stop every server of the local cluster."""
    from infra.cli import main

    raise typer.Exit(main(["down"]))


@cluster_app.command("status")
def cluster_status() -> None:
    """Show which servers of the local cluster run."""
    from infra.cli import main

    raise typer.Exit(main(["status"]))


if __name__ == "__main__":
    app()
