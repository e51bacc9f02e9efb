"""A node's restore, in-process: the same state from one full checkpoint against a chain of a
full one and ``--deltas`` deltas (``checkpoints.chain``: 30 at most, ``FULL_EVERY_DELTAS``).

A node that starts reads the newest checkpoint; most of them are deltas, so it downloads and
applies a full checkpoint and up to 30 deltas (``checkpoints.bootstrap``,
``snapshot.restore_chain``). This applies W3 orders (``bench/apply_cost.py``'s feed) through the
real state machine: ``--orders`` orders, a full checkpoint, then ``--deltas`` times ``--gap``
entries and a delta, into one local store with the real ``Checkpointer``; then a full one of the
very same state (same offset, same digest) into another. Each is restored by
``checkpoints.restore_newest`` into a fresh state machine (digest checked), alternating A B B A
per round: ``full`` against ``chain``.

Per restore: the process's CPU and the wall time of ``restore_newest`` (download, restore,
digest), the bytes read from the store (every part of every link, manifests included), and the
chain's CPU and bytes over the full one's. NOISY on a shared machine: compare the two kinds of
one run; the CPU time moves less with the machine's load than the wall time. A production
delta holds 20,000 entries; the default ``--gap`` is 2,000 to stay within a few minutes
(``--gap 20000`` for the real size).

    .venv/bin/python bench/checkpoint_restore.py            # 30,000 orders, 30 deltas
    .venv/bin/python bench/checkpoint_restore.py --quick    # 10,000 orders, 30 deltas of 500
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.apply_cost import build_feed  # noqa: E402
from bench.checkpoint_common import apply_entries, apply_orders, parser  # noqa: E402
from bench.harness import Report  # noqa: E402
from checkpoints import Checkpointer, restore_newest, store_from_url  # noqa: E402
from checkpoints.chain import FULL_EVERY_DELTAS  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

COLUMNS = ["restore", "links", "restores", "runs_held", "cpu_ms_p50", "wall_ms_p50",
           "mb_read_p50", "cpu_vs_full", "read_vs_full", "cpus"]


class ReadCounter:
    """A store that counts the bytes read from it (parts and manifests)."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.url = inner.url
        self.bytes_read = 0

    def get_file(self, key: str, dst: Path) -> None:
        self.inner.get_file(key, dst)
        self.bytes_read += dst.stat().st_size

    def get_bytes(self, key: str, size_max: int) -> bytes:
        data = self.inner.get_bytes(key, size_max)
        self.bytes_read += len(data)
        return data

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def main() -> None:
    ap = parser(__doc__, orders_help="orders before the full checkpoint", rounds_default=1,
                rounds_help="rounds of A B B A", gap_default=None,
                gap_help="entries between two deltas (default 2,000; --quick 500)")
    ap.add_argument("--deltas", type=int, default=FULL_EVERY_DELTAS,
                    help="deltas on the full checkpoint")
    args = ap.parse_args()
    orders = args.orders or (10_000 if args.quick else 30_000)
    gap = args.gap or (500 if args.quick else 2_000)
    if not 1 <= args.deltas <= FULL_EVERY_DELTAS:
        raise SystemExit(f"--deltas must be in 1..{FULL_EVERY_DELTAS}")
    # at least one entry an order: enough for the deltas' entries after ``orders``
    feed, first, _ = build_feed(orders + args.deltas * gap + 1000, args.seed)
    records = feed.records
    scratch = Path(tempfile.mkdtemp(prefix="railflow-ckpt-restore-"))
    stores = {kind: store_from_url((scratch / f"store-{kind}").as_uri())
              for kind in ("full", "chain")}
    sm = RunnerStateMachine(scratch / "node")
    samples: dict[str, dict[str, list[float]]] = {}
    try:
        for offset, raw in records[:first]:  # setup and warm-up
            sm.apply(Entry.decode(raw, offset))
        cursor = apply_orders(sm, records, first, orders)
        chain = _write_chain(sm, stores["chain"], scratch, records, cursor, gap, args.deltas)
        full = _write_full(sm, stores["full"], scratch)
        if (full.offset, full.digest) != (chain.offset, chain.digest):
            raise SystemExit("the full checkpoint and the chain do not hold the same state")
        runs = sm.con.execute("SELECT count(*) FROM runs").fetchone()[0]
        sm.close()
        for n, kind in enumerate(["full", "chain", "chain", "full"] * args.rounds):
            s = samples.setdefault(kind, {"cpu": [], "wall": [], "bytes": []})
            cpu, wall, read = _restore(stores[kind], scratch / f"restored-{n}", chain.offset)
            s["cpu"].append(cpu)
            s["wall"].append(wall)
            s["bytes"].append(read)
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)

    report = Report("checkpoint_restore", args.quick)
    full_cpu = statistics.median(samples["full"]["cpu"])
    full_read = statistics.median(samples["full"]["bytes"])
    for kind in ("full", "chain"):
        s = samples[kind]
        cpu, read = statistics.median(s["cpu"]), statistics.median(s["bytes"])
        report.add(restore=kind, links=1 if kind == "full" else len(chain.chain) + 1,
                   restores=len(s["cpu"]), runs_held=runs, cpu_ms_p50=round(cpu, 1),
                   wall_ms_p50=round(statistics.median(s["wall"]), 1),
                   mb_read_p50=round(read / 1e6, 2), cpu_vs_full=round(cpu / full_cpu, 2),
                   read_vs_full=round(read / full_read, 2), cpus=[round(v) for v in s["cpu"]])
    print(f"chain / full: CPU {statistics.median(samples['chain']['cpu']) / full_cpu:.2f}, "
          f"bytes read {statistics.median(samples['chain']['bytes']) / full_read:.2f} "
          f"({len(chain.chain)} deltas of {gap:,} entries on a full one, {runs:,} runs "
          f"held; load {os.getloadavg()[0]:.1f} at the end)")
    report.write(COLUMNS)


def _write_chain(sm: RunnerStateMachine, store, scratch: Path, records: list, cursor: int,  # type: ignore[no-untyped-def]
                 gap: int, deltas: int):
    """A full checkpoint now, then ``deltas`` deltas ``gap`` entries apart; the last's
    manifest."""
    cp = Checkpointer(store, sm, every_entries=10**9, retain=2, scratch_root=scratch,
                      background_nice=None, full_every=deltas)
    try:
        manifest = _checkpoint(cp, sm)
        for _ in range(deltas):
            cursor = apply_entries(sm, records, cursor, gap)
            sm.flush()
            manifest = _checkpoint(cp, sm)
    finally:
        cp.close()
    if len(manifest.chain) != deltas:
        raise SystemExit(f"the chain holds {len(manifest.chain)} links, not {deltas}")
    return manifest


def _write_full(sm: RunnerStateMachine, store, scratch: Path):  # type: ignore[no-untyped-def]
    cp = Checkpointer(store, sm, every_entries=10**9, retain=2, scratch_root=scratch,
                      background_nice=None, full_every=0)
    try:
        return _checkpoint(cp, sm)
    finally:
        cp.close()


def _checkpoint(cp: Checkpointer, sm: RunnerStateMachine):  # type: ignore[no-untyped-def]
    cp.checkpoint(sm.applied_offset, 1)
    manifest = cp.wait()
    if manifest is None or cp.stats.failed:
        raise SystemExit(f"checkpoint at {sm.applied_offset} failed: see the log")
    return manifest


def _restore(store, node_dir: Path, offset: int) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    """Restore the newest checkpoint of ``store`` into a fresh state machine: CPU ms, wall ms,
    bytes read."""
    counted = ReadCounter(store)
    fresh = RunnerStateMachine(node_dir)
    try:
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        manifest = restore_newest(counted, fresh, scratch_root=node_dir.parent)
        cpu, wall = time.process_time_ns() - cpu0, time.perf_counter_ns() - wall0
    finally:
        fresh.close()
        shutil.rmtree(node_dir, ignore_errors=True)
    if manifest is None or manifest.offset != offset:
        raise SystemExit(f"the restore gave {manifest and manifest.offset}, not {offset}")
    return cpu / 1e6, wall / 1e6, counted.bytes_read


if __name__ == "__main__":
    main()
