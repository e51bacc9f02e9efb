"""Parity: compare the features job's values with ``Engine.ingest`` fed the same events in order.

Used by the tests and the benchmark: :func:`compare` (offline values by ``seq`` in memory),
:func:`compare_streams` (both sides in log order, memory flat: every value of ``small``) and
:func:`sampled_parity` (a seeded sample of whole group keys of ``month``, fed to a fresh online
engine) and :func:`partitioned_parity` (every value, one fresh online engine per disjoint range of
group keys, so no engine holds a whole data set's state). The online engine is the reference. Two
values agree only if they are equal *and* of the same Python type (1 and 1.0 differ), so a
rounding or a type change in the offline path counts as a mismatch.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metrics_engine.engine import Engine
from pipeline.ordering import SEQ, TS, InvariantViolation

examples_max = 20


@dataclass
class ParityReport:
    events: int = 0
    values: int = 0
    mismatches: int = 0
    by_metric: dict[str, int] = field(default_factory=dict)
    examples: list[tuple] = field(default_factory=list)


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def compare(events_in_log_order: Iterable[Mapping[str, Any]], definitions: Sequence[str],
            offline_by_seq: Mapping[int, Mapping[str, Any]], stream: str = "payments",
            engine_dir: str | Path | None = None) -> ParityReport:
    """Feed ``events`` to a fresh engine and count values that differ from ``offline_by_seq``."""
    report = ParityReport()
    with tempfile.TemporaryDirectory(prefix="railflow-parity-") as tmp:
        engine = Engine(engine_dir or Path(tmp) / "engine", fsync=False)
        try:
            for text in definitions:
                engine.define(text)
            for ev in events_in_log_order:
                payload = {k: v for k, v in ev.items() if k != SEQ}
                live = engine.ingest(stream, payload, payload[TS])
                offline = offline_by_seq[ev[SEQ]]
                report.events += 1
                for name, value in live.items():
                    report.values += 1
                    if not same(offline.get(name), value):
                        report.mismatches += 1
                        report.by_metric[name] = report.by_metric.get(name, 0) + 1
                        if len(report.examples) < examples_max:
                            report.examples.append((ev[SEQ], name, offline.get(name), value))
        finally:
            engine.close()
    return report


def compare_streams(events_in_log_order: Iterable[Mapping[str, Any]],
                    offline_in_log_order: Iterable[Mapping[str, Any]],
                    definitions: Sequence[str], stream: str = "payments") -> ParityReport:
    """Like :func:`compare`, but the offline rows arrive in the same order as the events, so
    memory stays flat in the data set's size (every value of ``small``: 405 M values)."""
    offline_iter = iter(offline_in_log_order)

    class _Next(Mapping):
        """Hands ``compare`` the offline row of each event as it asks, checking seq."""

        def __getitem__(self, seq: int) -> Mapping[str, Any]:
            row = next(offline_iter, None)
            if row is None or row[SEQ] != seq:
                got = None if row is None else row[SEQ]
                raise InvariantViolation(f"offline rows out of step: event seq {seq}, "
                                         f"offline seq {got}")
            return row

        def __iter__(self):
            raise NotImplementedError

        def __len__(self) -> int:
            raise NotImplementedError

    report = compare(events_in_log_order, definitions, _Next(), stream)
    if next(offline_iter, None) is not None:
        raise InvariantViolation("more offline rows than events")
    return report


_KEY_BUCKETS = 1_000_000


def key_sample(df, key: Sequence[str], fraction: float, seed: int, start: float = 0.0):
    """The rows of ``df`` whose group key falls in a seeded hash sample of ``fraction`` (of
    the hash range from ``start``): every event of a sampled key, none of the others (so the
    sample holds whole groups). Disjoint ranges give disjoint samples."""
    from pyspark.sql import functions as F

    h = F.pmod(F.xxhash64(F.lit(seed), *[F.col(c) for c in key]), F.lit(_KEY_BUCKETS))
    lo, hi = int(start * _KEY_BUCKETS), int(min(1.0, start + fraction) * _KEY_BUCKETS)
    return df.where((h >= F.lit(lo)) & (h < F.lit(hi)))


def sampled_parity(spark, events_path: str, features_path: str, definitions: Sequence[str],
                   events_min: int, seed: int, stream: str = "payments") -> ParityReport:
    """Parity on a seeded sample of group keys holding at least ``events_min`` events.

    A metric's value depends only on its own group's events, so every event of the sampled
    keys, fed in log order to a fresh online engine, must get exactly the features job's
    values. The sample is drawn per partition set (the columns its groups share), each set
    with its own metrics; the reports add up."""
    from pipeline.features import parse_definitions, plan_groups, plan_partitions

    events = spark.read.parquet(events_path)
    total = events.count()
    features = spark.read.parquet(features_path)
    total_report = ParityReport()
    for pset in plan_partitions(plan_groups(parse_definitions(definitions))):
        fraction, sample = min(1.0, 1.25 * events_min / max(total, 1)), None
        for _ in range(8):  # widen until the sample is large enough (skewed keys)
            sample = key_sample(events, pset.key, fraction, seed)
            if fraction >= 1.0 or sample.count() >= events_min:
                break
            fraction = min(1.0, fraction * 2)
        _add(total_report, _sample_parity(sample, features, pset, stream))
    return total_report


def partitioned_parity(spark, events_path: str, features_path: str, definitions: Sequence[str],
                       parts: int, seed: int, stream: str = "payments") -> ParityReport:
    """Parity on every event: per partition set, ``parts`` disjoint seeded ranges of group
    keys, each fed in log order to its own fresh online engine (exact, as for
    :func:`sampled_parity`: a value depends only on its group's events). An online engine
    holding every key of ``small`` under W2 would need tens of GiB; one range's engine holds
    ``1/parts`` of it."""
    from pipeline.features import parse_definitions, plan_groups, plan_partitions

    events = spark.read.parquet(events_path)
    features = spark.read.parquet(features_path)
    total_report = ParityReport()
    parts = max(1, parts)
    for pset in plan_partitions(plan_groups(parse_definitions(definitions))):
        for i in range(parts):
            hi = 1.0 if i == parts - 1 else (i + 1) / parts
            sample = key_sample(events, pset.key, hi - i / parts, seed, start=i / parts)
            _add(total_report, _sample_parity(sample, features, pset, stream))
    return total_report


def _sample_parity(sample, features, pset, stream: str) -> ParityReport:
    """Parity of one key sample's events (both sides streamed in log order)."""
    names = list(pset.names)
    rows = (r.asDict() for r in sample.orderBy("ts", SEQ).toLocalIterator(True))
    offline = (r.asDict() for r in features.select(SEQ, "ts", *names)
               .join(sample.select(SEQ), on=SEQ, how="left_semi")
               .orderBy("ts", SEQ).drop("ts").toLocalIterator(True))
    return compare_streams(rows, offline, list(pset.texts), stream)


def _add(total: ParityReport, report: ParityReport) -> None:
    total.events += report.events
    total.values += report.values
    total.mismatches += report.mismatches
    for k, v in report.by_metric.items():
        total.by_metric[k] = total.by_metric.get(k, 0) + v
    total.examples += report.examples[: examples_max - len(total.examples)]
