"""Parity: compare the features job's values with ``Engine.ingest`` fed the same events in order.

Used by the tests (tiny) and the benchmark (small): the online engine is the reference. Two
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
from pipeline.ordering import SEQ, TS

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
