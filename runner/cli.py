"""The ``railflow`` command line (Typer)."""

import typer
from rich.console import Console

app = typer.Typer(help="Railflow: a fraud decision service.", no_args_is_help=True)
cluster_app = typer.Typer(help="The real local cluster from infra/.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
console = Console()


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8000, help="Port to serve the API and console on."),
) -> None:
    """Start the service (embedded default: file log, single node, local state)."""
    import uvicorn

    from runner.api.app import create_app

    console.print(f"[bold green]Railflow[/] serving on http://{host}:{port}  (docs: /docs)")
    uvicorn.run(create_app(), host=host, port=port, log_level="info")


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
