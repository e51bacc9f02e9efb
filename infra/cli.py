"""``python -m infra up|down|status [--only NAME ...]``: the cluster's one entry point.

``main(argv) -> int`` is also what ``railflow cluster ...`` calls. Exit code 0 means every
selected server is up and answered a round trip (``up``, ``status``) or is stopped (``down``).
"""

import argparse

from rich.console import Console
from rich.table import Table

from infra import cluster, jars, paths
from infra.errors import InfraError

MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status", "fetch"))
    parser.add_argument("--only", action="append", metavar="SERVER",
                        help=f"limit to a server ({', '.join(s.name for s in cluster.SERVERS)})")
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.command == "fetch":
            for profile, secs in cluster.fetch_jars().items():
                done = f"fetched in {secs:.1f} s" if secs else "cached"
                console.print(f"  jars {profile}: {done}  ({jars.profile_dir(profile)})")
            return 0
        if args.command == "up":
            console.print(f"[bold]cluster up[/]  (logs: {paths.LOG_DIR})")
            reports = cluster.up(args.only, log=console.print)
            _print_status(console)
            return 0 if all(r.action != "failed" for r in reports) else 1
        if args.command == "down":
            console.print("[bold]cluster down[/]")
            cluster.down(args.only, log=console.print)
            return 0
        return 0 if _print_status(console) else 1
    except InfraError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1


def _print_status(console: Console) -> bool:
    rows = cluster.status(probe=True)
    table = Table(title=f"Railflow local cluster (logs: {paths.LOG_DIR})")
    for col in ("server", "process", "pid", "ports", "rss MiB", "state"):
        table.add_column(col)
    for r in rows:
        state = {True: "[green]healthy[/]", False: "[yellow]not answering[/]",
                 None: "[red]down[/]"}[r.healthy]
        table.add_row(r.server, r.process, str(r.pid or "-"), ",".join(map(str, r.ports)),
                      f"{r.rss_bytes / MIB:.0f}" if r.pid else "-", state)
    spark_ok = jars.is_cached("spark")
    table.add_row("spark", "(local, in the caller)", "-", "-", "-",
                  "[green]jars cached[/]" if spark_ok else "[red]jars missing[/]")
    console.print(table)
    return all(r.healthy for r in rows)
