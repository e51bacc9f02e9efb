"""``railflow pipeline features|backfill|backtest|synthetic``: the Spark jobs from the shell.

Mounted by ``runner/cli.py`` lazily, so ``railflow serve`` never imports pyspark. The same
commands run under ``spark-submit pipeline/submit.py <command> ...`` (see submit.py).
"""

from __future__ import annotations

import orjson
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

app = typer.Typer(help="Spark jobs: point-in-time metrics, backfills, backtests, synthetic data.",
                  no_args_is_help=True)
console = Console()


def _session(master: str | None, conf: list[str] | None = None):
    from pipeline.session import spark_session

    pairs = dict(c.split("=", 1) for c in conf or [] if "=" in c)
    bad = [c for c in conf or [] if "=" not in c]
    if bad:
        raise typer.BadParameter(f"--conf takes key=value, got {bad}", param_hint="--conf")
    return spark_session(master=master, conf=pairs)


def _run(title: str, fn):
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(title, total=None)
        result = fn(lambda n: progress.update(task, description=f"{title}: {n:,} events"))
    console.print_json(orjson.dumps(result).decode())
    return result


MASTER = typer.Option(None, help="Spark master (default local[*], or spark-submit's), e.g. "
                      "spark://host:7077 or yarn.")
CONF = typer.Option(None, "--conf", help="Spark setting key=value (repeatable), e.g. "
                    "spark.jars=... or spark.hadoop.fs.s3a.endpoint=...")
EVENTS_HELP = ("Events: Parquet path or URL (s3a://, hdfs://) or the log topic "
               "kafka://host:port/topic.")


@app.command("features")
def features_cmd(
    events: str = typer.Option(..., help=EVENTS_HELP),
    metrics: str = typer.Option("w1", help="Metric set (w1, w2, w2_card, w3) or a file."),
    out: str = typer.Option(..., help="Output Parquet directory."),
    partitions: int = typer.Option(None, help="Partitions per group key (default: shuffle)."),
    master: str = MASTER,
    conf: list[str] = CONF,
) -> None:
    """For every event, each metric's value as the online engine gave it."""
    from pipeline import jobs

    spark = _session(master, conf)
    _run("point-in-time metrics", lambda _p: jobs.run_features(spark, events, metrics, out,
                                                              partitions))


@app.command("backfill")
def backfill_cmd(
    events: str = typer.Option(..., help=EVENTS_HELP),
    new: str = typer.Option(..., help="New metric set or file."),
    existing: str = typer.Option(None, help="Metrics the live engine already serves."),
    out: str = typer.Option(..., help="Snapshot directory to write (must be empty)."),
    stream: str = typer.Option("payments"),
    partitions: int = typer.Option(None, help="Key partitions per set of metrics sharing "
                                   "key columns (default: from the events and the cores)."),
    master: str = MASTER,
    conf: list[str] = CONF,
) -> None:
    """Build the engine snapshot that serves new metrics exactly from now on."""
    from pipeline import jobs

    spark = _session(master, conf)
    _run("backfill", lambda p: jobs.run_backfill(spark, events, new, existing, out, stream, p,
                                                 partitions))


@app.command("backtest")
def backtest_cmd(
    history: str = typer.Option(..., help="Events with metrics (the features output)."),
    workflow: str = typer.Option(..., help="Workflow JSON, or sift_example / w3_demo."),
    out: str = typer.Option(..., help="Output directory: outcomes/ (per-event Parquet) and "
                            "summary.json."),
    version: int = typer.Option(0, help="Version number to report (0 for a draft)."),
    base: str = typer.Option(None, help="Version to compare with (e.g. the published one)."),
    base_version: int = typer.Option(0),
    scorer: str = typer.Option(None, help="module:function adding score_<name> when history "
                               "has no recorded scores, e.g. runner.scoring:demo_score."),
    score_name: str = typer.Option("payment_abuse"),
    master: str = MASTER,
    conf: list[str] = CONF,
) -> None:
    """Replay history through a workflow version; decisions, paths and changes vs a base."""
    from pipeline import jobs

    spark = _session(master, conf)
    _run("backtest", lambda _p: jobs.run_backtest(spark, history, workflow, out, version, base,
                                                  base_version, scorer, score_name))


@app.command("synthetic")
def synthetic_cmd(
    size: str = typer.Option("tiny", help="tiny, small, month or a number of events."),
    seed: int = typer.Option(7),
    out: str = typer.Option(...),
    partitions: int = typer.Option(None, help="Tasks (default: one per day block)."),
    master: str = MASTER,
    conf: list[str] = CONF,
) -> None:
    """Generate the synthetic data set as a Spark job, partitioned by day block."""
    from pipeline import jobs

    spark = _session(master, conf)
    _run("synthetic data", lambda _p: jobs.run_synthetic(spark, size, seed, out, partitions))


if __name__ == "__main__":
    app()
