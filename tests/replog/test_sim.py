"""The seeded simulation: at least 10,000 seeds per run, each failing seed printed for replay."""

import multiprocessing
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from replog.testing.dictkv import DictKV
from replog.testing.kv import DuckKV
from replog.testing.sim import Config, replay_command, run_seed

DEFAULT_CONFIG = Config()

SEEDS = int(os.environ.get("REPLOG_SIM_SEEDS", "10000"))
FIRST = int(os.environ.get("REPLOG_SIM_FIRST_SEED", "0"))


def _chunk(seeds, make_sm=DictKV, config=DEFAULT_CONFIG):
    faults: Counter[str] = Counter()
    failures = []
    for seed in seeds:
        problems, sim = run_seed(seed, config, make_sm)
        faults.update(sim.faults)
        if problems:
            failures.append(f"seed {seed}: {problems[:3]}\n  replay: {replay_command(seed)}")
    return failures, faults


def _run(seeds, make_sm=DictKV, processes=1):
    """Run seeds, split over ``processes`` (each seed is independent and deterministic)."""
    seeds = list(seeds)
    if processes > 1:
        chunks = [seeds[i::processes] for i in range(processes)]
        # Spawned, not forked: the test process already runs threads (Kafka clients, the
        # cluster fixture) and a fork can copy one of their locks held, hanging the child.
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=spawn) as pool:
            parts = list(pool.map(_chunk, chunks))
    else:
        parts = [_chunk(seeds, make_sm)]
    failures = [f for part in parts for f in part[0]]
    faults = sum((part[1] for part in parts), Counter())
    print(f"\n{len(seeds)} seeds, faults exercised: {dict(sorted(faults.items()))}")
    return failures, faults


def test_simulation_many_seeds_hold_every_invariant():
    failures, faults = _run(range(FIRST, FIRST + SEEDS), processes=min(2, os.cpu_count() or 1))
    assert not failures, "\n".join(failures[:10])
    from replog.testing.sim import FAULT_KINDS

    assert all(faults[k] > 0 for k in FAULT_KINDS), faults


def test_simulation_with_the_duckdb_reference_machine():
    failures, _ = _run(range(8), make_sm=DuckKV)
    assert not failures, "\n".join(failures)


def test_a_seed_replays_exactly():
    a = run_seed(4242)[1]
    b = run_seed(4242)[1]
    assert a.log == b.log
    assert [(q.id, q.outcome, q.offset) for q in a.requests] == [
        (q.id, q.outcome, q.offset) for q in b.requests
    ]


def test_the_paused_leader_writes_late_and_is_fenced_in_some_seeds():
    """The fault the fencing exists for must actually happen in the simulated runs."""
    from replog.entry import Entry

    late_writes = 0
    for seed in range(250):
        _, sim = run_seed(seed)
        top = -1
        for o, b in enumerate(sim.log):
            e = Entry.decode(b, o)
            late_writes += e.writer_id < top
            top = max(top, e.writer_id)
    assert late_writes > 0


def test_checkers_catch_a_core_without_fencing(monkeypatch):
    from replog.fence import Fence, Verdict

    def accept_all(self, writer_id, seq):
        self.writer_id = max(self.writer_id, writer_id)
        return Verdict.ACCEPT

    monkeypatch.setattr(Fence, "admit", accept_all)
    failing = [s for s in range(200) if run_seed(s)[0]]
    assert failing, "the simulation cannot tell a broken fence from a working one"


def test_command_line_replays_one_seed(capsys):
    from replog.testing.sim import main

    assert main(["--seed", "18", "--trace"]) == 0
    out = capsys.readouterr().out
    assert "1 seeds, 0 failed" in out and "elected" in out


def test_leaders_apply_their_own_records_and_read_the_gaps_in_some_seeds():
    """The new protocol's both paths happen: own records applied without reading, and a
    leader reading the log across gaps (stale writers, duplicates, appends that failed but
    landed, acknowledgements without offsets)."""
    own = gaps = 0
    for seed in range(200):
        problems, sim = run_seed(seed)
        assert not problems, (seed, problems[:3])
        own += sum(r.own_applied for r in sim.replicas.values())
        gaps += sum(r.gap_reads for r in sim.replicas.values())
    assert own > 0 and gaps > 0


def test_checkers_catch_a_leader_applying_its_records_at_the_wrong_offsets(monkeypatch):
    from replog.core import ReplicaCore

    real = ReplicaCore.appended

    def off_by_one(self, entries, offsets):
        real(self, entries, None if offsets is None else [o + 1 for o in offsets])

    monkeypatch.setattr(ReplicaCore, "appended", off_by_one)
    failing = [s for s in range(100) if run_seed(s)[0]]
    assert failing, "the simulation cannot tell own records applied at the wrong offset"


def test_both_ways_a_leader_writes_are_simulated():
    """Even seeds send record by record (many in flight, reported one by one), odd seeds run
    one group commit at a time; leaders apply their own records without reading them both
    ways, and a pipelined leader has more than one record in flight at some point."""
    pipelined, grouped = run_seed(10)[1], run_seed(11)[1]
    assert pipelined.pipelined and not grouped.pipelined
    for sim in (pipelined, grouped):
        assert sum(r.own_applied for r in sim.replicas.values()) > 0
    assert any(run_seed(seed)[1].in_flight_max > 1 for seed in range(0, 40, 2))
    forced = run_seed(11, Config(pipelined=True))[1]
    assert forced.pipelined and not run_seed(10, Config(pipelined=False))[1].pipelined
