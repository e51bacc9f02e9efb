"""A seeded deterministic simulation of a replog cluster: one thread, simulated time.

Three replicas run the real ``ReplicaCore`` over a fake log (one list of records, appends land
after a delay and are acknowledged with their offsets), a fake ZooKeeper (sequential ids,
sessions that expire when their owner is dead or paused past the timeout) and a fake network.
Replicas follow ``replog.node``'s protocol: a follower reads every record; a leader applies its
own acknowledged records without reading them (``take_own``), reads the log only where
``must_read`` says (gaps: a deposed writer's records, duplicates, failed appends that landed
anyway, acknowledgements without offsets) and, when idle for a tick, probes the log's end.
A leader writes in one of two ways, every other seed (``Config.pipelined``): one group commit
in flight at a time (the appender), or each batch sent at once as the core releases it, many
in flight, each record landing in the order sent and reported on its own (Kafka's produce and
delivery reports), a send that the log refuses at once failing the rest of its batch.
Faults, drawn from the seed: leader crash, follower crash and restart (from the start or from a
checkpoint), leader paused past its session timeout (it resumes and writes after the new
leader was elected), short pauses, duplicated appends, delayed and repeated deliveries, failed
appends (half of them land all the same), acknowledgements that carry no offsets. After the
faults stop, a probe request must be acknowledged and every replica must catch up. The
checkers in ``replog.testing.checker`` then judge the history, and each own record a leader
applied must equal the record the log holds at its offset.

Replay one seed with its trace: ``python -m replog.testing.sim --seed 1234 --trace``.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from replog.core import Completion, ReplicaCore, Role
from replog.entry import Entry
from replog.errors import NotLeader, ReplogError
from replog.testing import checker, ops
from replog.testing.dictkv import DictKV

FAULT_KINDS = (
    "crash_leader",
    "crash_follower",
    "pause_leader_past_session",
    "pause_short",
    "duplicate_appends",
    "delayed_deliveries",
    "redeliveries",
    "failed_appends",
    "unknown_offsets",
)


@dataclass(frozen=True)
class Config:
    nodes: int = 3
    requests: int = 20
    faults_max: int = 3
    fault_window_ms: int = 1200
    settle_ms: int = 1200
    session_timeout_ms: int = 150
    request_timeout_ms: int = 300
    tick_ms: int = 100
    checkpoint_every_entries: int = 4
    pipelined: bool | None = None  # None: seeds that are even send record by record


DEFAULT_CONFIG = Config()


@dataclass
class Request:
    id: str
    kind: str
    payload: bytes
    outcome: str = "pending"  # ok | fail | pending (indeterminate)
    offset: int = -1
    writer_id: int = -1


@dataclass
class Replica:
    name: str
    incarnation: int = 0
    alive: bool = True
    paused_until: int = 0
    core: ReplicaCore = field(default_factory=ReplicaCore)
    sm: Any = None
    cursor: int = 0
    start_offset: int = 0
    zk_seq: int | None = None
    appending: bool = False
    landing_at: int = 0  # a sending leader's records land in the order sent
    in_flight: int = 0  # records sent and not reported yet
    tokens: dict[int, Request] = field(default_factory=dict)
    applied: list[tuple[int, int, int]] = field(default_factory=list)
    applied_ts: list[int] = field(default_factory=list)
    digests: dict[int, str] = field(default_factory=dict)
    checkpoint: tuple[Any, int, int, int] | None = None  # (state, offset, writer, seq)
    progress_at: int = 0  # when it last processed a record
    own_applied: int = 0  # records applied as a leader without reading them
    gap_reads: int = 0  # records a leader read from the log
    mismatches: list[int] = field(default_factory=list)  # own records unlike the log's


class Simulation:
    def __init__(
        self,
        seed: int,
        config: Config = DEFAULT_CONFIG,
        make_sm: Callable[[], Any] = DictKV,
        trace: bool = False,
    ):
        self.seed = seed
        self.cfg = config
        self.rng = random.Random(seed)
        self.make_sm = make_sm
        self.trace_on = trace
        self.now = 0
        self._heap: list[tuple[int, int, Callable[..., None], tuple]] = []
        self._counter = 0
        self.log: list[bytes] = []
        self.zk: dict[str, int] = {}
        self._zk_next = 1
        self._zk_leader: str | None = None
        self.replicas = {f"n{i}": Replica(f"n{i}") for i in range(config.nodes)}
        self.requests: list[Request] = []
        self.faults: Counter[str] = Counter()
        self.rates = {"dup": 0.0, "delay": 0.0, "redeliver": 0.0, "fail": 0.0, "blind": 0.0}
        self.probe: Request | None = None
        self.pipelined = seed % 2 == 0 if config.pipelined is None else config.pipelined
        self.in_flight_max = 0  # the most records one leader had sent and not seen reported

    # -- scheduling ---------------------------------------------------------------------
    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (t, self._counter, fn, args))

    def on(self, t: int, r: Replica, fn: Callable[..., None], *args: Any) -> None:
        """An event for one incarnation of a replica: dropped if it crashed, held while paused."""
        self.at(t, self._node_event, r, r.incarnation, fn, args)

    def _node_event(self, r: Replica, inc: int, fn: Callable[..., None], args: tuple) -> None:
        if not r.alive or r.incarnation != inc:
            return
        if self.now < r.paused_until:
            self.at(r.paused_until, self._node_event, r, inc, fn, args)
            return
        fn(r, *args)

    def trace(self, msg: str) -> None:
        if self.trace_on:
            print(f"{self.now:6d} ms  {msg}")

    def delay(self, low: int, high: int, slow_rate: float = 0.0) -> int:
        if slow_rate and self.rng.random() < slow_rate:
            return self.rng.randint(20, 80)
        return self.rng.randint(low, high)

    # -- fake ZooKeeper -----------------------------------------------------------------
    def zk_join(self, r: Replica) -> None:
        r.zk_seq = self._zk_next
        self._zk_next += 1
        self.zk[r.name] = r.zk_seq
        self.trace(f"{r.name} joins the election as {r.zk_seq}")
        self.zk_recompute()

    def zk_recompute(self) -> None:
        leader = min(self.zk, key=self.zk.__getitem__) if self.zk else None
        if leader == self._zk_leader:
            return
        self._zk_leader = leader
        if leader is not None:
            r = self.replicas[leader]
            self.on(self.now + self.delay(1, 5), r, self.node_elected, self.zk[leader])

    def zk_expire(self, name: str, seq: int) -> None:
        if self.zk.get(name) != seq:
            return
        r = self.replicas[name]
        if r.alive and self.now >= r.paused_until and r.zk_seq == seq:
            return  # it came back in time and heartbeated
        del self.zk[name]
        self.trace(f"session {seq} of {name} expires")
        self.zk_recompute()
        # A paused node learns of the expiry only after it resumes and reconnects.
        learn = max(self.now, r.paused_until) + self.delay(1, 20)
        self.on(learn, r, self.node_session_lost, seq)

    # -- replica handlers ---------------------------------------------------------------
    def node_elected(self, r: Replica, seq: int) -> None:
        if r.zk_seq != seq or self.zk.get(r.name) != seq:
            return
        ok, comps = r.core.elected(seq)
        self.trace(f"{r.name} elected as {seq} ({'ok' if ok else 'refused'})")
        self.complete(r, comps)
        if not ok:
            del self.zk[r.name]
            self.zk_recompute()
            self.zk_join(r)
            return
        self.on(self.now, r, self.node_append)

    def node_session_lost(self, r: Replica, seq: int) -> None:
        if r.zk_seq != seq:
            return
        self.trace(f"{r.name} learns its session {seq} is lost")
        self.complete(r, r.core.deposed("session lost"))
        r.zk_seq = None
        self.on(self.now + self.delay(1, 10), r, self.zk_join)

    def node_request(self, r: Replica, req: Request, hops: int) -> None:
        if r.core.role is Role.FOLLOWER:
            leader = self._zk_leader
            if leader is None or leader == r.name or hops >= 2:
                self.finish(req, "fail")
                return
            target = self.replicas[leader]
            self.on(self.now + self.delay(1, 3), target, self.node_request, req, hops + 1)
            return
        try:
            token = r.core.submit(req.kind, req.payload, self.now, self.cfg.request_timeout_ms)
        except ReplogError:
            self.finish(req, "fail")
            return
        r.tokens[token] = req
        self.node_append(r)  # the appender runs at once: a paused leader writes on resume

    def node_append(self, r: Replica) -> None:
        if self.pipelined:
            self.node_send(r)
            return
        if r.appending or not r.core.has_batch():
            return
        batch = r.core.take_batch(self.now)
        if not batch:
            return
        records = [e.encode() for e in batch]
        if self.rng.random() < self.rates["fail"]:
            self.trace(f"{r.name} append of {len(batch)} fails")
            if self.rng.random() < 0.5:  # indeterminate: the log took them all the same
                self.at(self.now + self.delay(1, 10), self.log_land, records,
                        r.name + " (failed)", None)
            self.complete(r, r.core.append_failed([e.seq for e in batch], "injected"))
            self.on(self.now + 1, r, self.node_append)
            return
        r.appending = True
        landed: list[int] = []
        landing = self.now + self.delay(1, 4, self.rates["delay"])
        self.at(landing, self.log_land, records, r.name, landed)
        if self.rng.random() < self.rates["dup"]:
            self.at(landing + self.delay(1, 30), self.log_land, records, r.name + " (duplicate)",
                    None)
        self.on(landing + 1, r, self.node_appended, batch, landed)

    def node_appended(self, r: Replica, batch: list[Entry], landed: list[int]) -> None:
        r.appending = False
        if self.rng.random() < self.rates["blind"]:
            self.trace(f"{r.name} learns no offsets for its append")
            r.core.appended(batch, None)
            if self.rng.random() < 0.5:  # it asks where the log ends (else that fails)
                r.core.log_ends_at(len(self.log))
        else:
            r.core.appended(batch, landed)
        self.node_deliver(r)
        self.node_append(r)

    def node_send(self, r: Replica) -> None:
        """Send every batch the core releases, record by record, without waiting: each lands
        after the one sent before it and is reported alone; the log may refuse a send at once
        (it and the rest of its batch fail; what is left is sent on the next turn) or fail a
        record after taking it or not."""
        core = r.core
        while core.has_batch():
            batch = core.take_batch(self.now)
            for i, entry in enumerate(batch):
                if self.rng.random() < self.rates["fail"] / 2:
                    self.trace(f"{r.name} send of seq {entry.seq} refused")
                    self.complete(r, core.append_failed([e.seq for e in batch[i:]], "refused"))
                    self.on(self.now + 1, r, self.node_append)
                    return
                record = entry.encode()
                landing = max(self.now + self.delay(1, 4, self.rates["delay"]), r.landing_at)
                r.landing_at = landing
                if self.rng.random() < self.rates["fail"] / 2:
                    self.trace(f"{r.name} record seq {entry.seq} fails")
                    if self.rng.random() < 0.5:  # indeterminate: the log took it all the same,
                        # in its turn, or after later records (a replaced producer's purged
                        # request that reached the broker anyway)
                        late = self.delay(1, 30) if self.rng.random() < 0.5 else 0
                        self.at(landing + late, self.log_land, [record], r.name + " (failed)",
                                None)
                    r.in_flight += 1
                    self.on(landing + 1, r, self.node_sent, entry, None)
                    continue
                r.in_flight += 1
                self.in_flight_max = max(self.in_flight_max, r.in_flight)
                landed: list[int] = []
                self.at(landing, self.log_land, [record], r.name, landed)
                if self.rng.random() < self.rates["dup"]:
                    self.at(landing + self.delay(1, 30), self.log_land, [record],
                            r.name + " (duplicate)", None)
                self.on(landing + 1, r, self.node_sent, entry, landed)

    def node_sent(self, r: Replica, entry: Entry, landed: list[int] | None) -> None:
        """One record's report: where it landed, or that it failed."""
        core = r.core
        r.in_flight -= 1
        if landed is None:
            self.complete(r, core.append_failed([entry.seq], "injected"))
            self.on(self.now + 1, r, self.node_append)  # a failed LeaderStarted is queued again
        elif self.rng.random() < self.rates["blind"]:
            self.trace(f"{r.name} learns no offset for seq {entry.seq}")
            core.appended([entry], None)
            if self.rng.random() < 0.5:
                core.log_ends_at(len(self.log))
        else:
            core.appended([entry], landed)
        self.node_deliver(r)

    def log_land(self, records: list[bytes], writer: str, landed: list[int] | None) -> None:
        self.trace(f"{len(records)} records from {writer} land at {len(self.log)}")
        if landed is not None:
            landed.extend(range(len(self.log), len(self.log) + len(records)))
        self.log.extend(records)
        for r in self.replicas.values():
            self.on(self.now + self.delay(0, 3, self.rates["delay"]), r, self.node_deliver)

    def node_deliver(self, r: Replica) -> None:
        core = r.core
        r.cursor = max(r.cursor, core.next_offset)  # a reader opens where the node stands
        if self.rates["redeliver"] and self.rng.random() < self.rates["redeliver"]:
            r.cursor = max(r.start_offset, r.cursor - self.rng.randint(1, 3))
        while True:
            leading = core.role is not Role.FOLLOWER
            if leading:
                own = core.take_own()
                if own:
                    for entry in own:
                        r.own_applied += 1
                        self.process(r, entry, own=True)
                    continue
                if not core.must_read():
                    break
            if r.cursor >= len(self.log):
                break
            offset = r.cursor
            r.cursor += 1
            r.gap_reads += leading
            self.process(r, Entry.decode(self.log[offset], offset), own=False)
        if core.has_batch():
            self.node_append(r)

    def process(self, r: Replica, entry: Entry, own: bool) -> None:
        offset = entry.offset
        if own and (offset >= len(self.log) or Entry.decode(self.log[offset], offset) != entry):
            r.mismatches.append(offset)
        step = r.core.begin(entry)
        self.complete(r, step.completions)
        if step.verdict is None:
            return
        r.progress_at = self.now
        if step.apply:
            effects = r.sm.apply(step.entry)
            self.complete(r, r.core.finish(step, effects))
            r.applied.append((offset, step.entry.writer_id, step.entry.seq))
            r.applied_ts.append(step.entry.ts)
            r.digests[offset] = r.sm.digest()
            if len(r.applied) % self.cfg.checkpoint_every_entries == 0:
                r.checkpoint = (
                    r.sm.snapshot(),
                    offset,
                    r.core.fence.writer_id,
                    r.core.fence.seq,
                )

    def node_tick(self, r: Replica) -> None:
        self.complete(r, r.core.expire(self.now))
        if r.core.role is not Role.FOLLOWER and r.progress_at <= self.now - self.cfg.tick_ms:
            r.core.log_ends_at(len(self.log))  # an idle leader asks where the log ends
            self.node_deliver(r)
        self.on(self.now + self.cfg.tick_ms, r, self.node_tick)

    def complete(self, r: Replica, comps: list[Completion]) -> None:
        for c in comps:
            req = r.tokens.pop(c.token, None)
            if req is None:
                continue
            if c.result is not None:
                req.offset, req.writer_id = c.result.offset, c.result.writer_id
                self.finish(req, "ok")
            elif isinstance(c.error, NotLeader) and not r.core.is_leader:
                self.finish(req, "fail")
            else:
                self.finish(req, "fail")

    def finish(self, req: Request, outcome: str) -> None:
        if req.outcome == "pending":
            req.outcome = outcome
            self.trace(f"{req.id} -> {outcome} {req.offset if outcome == 'ok' else ''}")

    # -- lifecycle and faults -----------------------------------------------------------
    def boot(self, r: Replica, from_checkpoint: bool) -> None:
        sm = self.make_sm()
        start, writer, seq = 0, -1, -1
        if from_checkpoint and r.checkpoint is not None:
            snap, offset, writer, seq = r.checkpoint
            self.faults["restarts_from_checkpoint"] += 1
            sm = _restore_in_memory(sm, snap)
            start = offset + 1
        r.core = ReplicaCore(start_offset=start, start_writer_id=writer)
        r.core.fence.seq = seq
        r.sm, r.cursor, r.start_offset = sm, start, start
        r.appending, r.tokens, r.progress_at = False, {}, self.now
        r.landing_at = r.in_flight = 0
        r.applied, r.applied_ts = [], []
        r.alive, r.paused_until = True, 0
        self.zk_join(r)
        self.on(self.now + self.cfg.tick_ms, r, self.node_tick)
        self.on(self.now + 1, r, self.node_deliver)

    def crash(self, r: Replica, down_ms: int, from_checkpoint: bool) -> None:
        if not r.alive:
            return
        self.trace(f"{r.name} crashes for {down_ms} ms")
        r.alive = False
        r.incarnation += 1
        r.tokens.clear()  # its clients see a reset connection: indeterminate
        if r.zk_seq is not None:
            self.at(self.now + self.cfg.session_timeout_ms, self.zk_expire, r.name, r.zk_seq)
        r.zk_seq = None
        self.at(self.now + down_ms, self.restart, r, from_checkpoint)

    def restart(self, r: Replica, from_checkpoint: bool) -> None:
        self.trace(f"{r.name} restarts ({'checkpoint' if from_checkpoint else 'empty'})")
        r.incarnation += 1
        self.boot(r, from_checkpoint)

    def pause(self, r: Replica, ms: int) -> None:
        if not r.alive or self.now < r.paused_until:
            return
        self.trace(f"{r.name} pauses for {ms} ms")
        r.paused_until = self.now + ms
        if ms > self.cfg.session_timeout_ms and r.zk_seq is not None:
            self.at(self.now + self.cfg.session_timeout_ms, self.zk_expire, r.name, r.zk_seq)

    def leader(self) -> Replica | None:
        return self.replicas[self._zk_leader] if self._zk_leader else None

    def inject(self, kind: str) -> None:
        cfg = self.cfg
        self.faults[kind] += 1
        leader = self.leader()
        followers = [r for r in self.replicas.values() if r is not leader]
        if kind == "crash_leader" and leader is not None:
            self.crash(leader, self.rng.randint(10, 600), self.rng.random() < 0.5)
        elif kind == "crash_follower":
            self.crash(
                self.rng.choice(followers), self.rng.randint(10, 600), self.rng.random() < 0.5
            )
        elif kind == "pause_leader_past_session" and leader is not None:
            self.pause(leader, cfg.session_timeout_ms + self.rng.randint(50, 400))
        elif kind == "pause_short":
            self.pause(
                self.rng.choice(list(self.replicas.values())),
                self.rng.randint(1, cfg.session_timeout_ms // 2),
            )
        elif kind == "duplicate_appends":
            self.rates["dup"] = 0.3
        elif kind == "delayed_deliveries":
            self.rates["delay"] = 0.2
        elif kind == "redeliveries":
            self.rates["redeliver"] = 0.3
        elif kind == "failed_appends":
            self.rates["fail"] = 0.1
        elif kind == "unknown_offsets":
            self.rates["blind"] = 0.3

    def heal(self) -> None:
        self.trace("faults stop")
        self.rates = dict.fromkeys(self.rates, 0.0)
        for r in self.replicas.values():
            r.paused_until = min(r.paused_until, self.now)

    def client(self, req: Request) -> None:
        alive = [r for r in self.replicas.values() if r.alive]
        if not alive:
            self.finish(req, "fail")
            return
        r = self.rng.choice(alive)
        self.on(self.now + self.delay(0, 2), r, self.node_request, req, 0)

    def send_probe(self, attempt: int) -> None:
        if self.probe is not None and self.probe.outcome == "ok":
            return
        self.probe = Request(f"probe{attempt}", ops.KIND, ops.put(f"probe{attempt}", attempt))
        self.requests.append(self.probe)
        self.client(self.probe)
        if self.now + 100 < self.cfg.fault_window_ms + self.cfg.settle_ms:
            self.at(self.now + 100, self.send_probe, attempt + 1)

    # -- run ----------------------------------------------------------------------------
    def run(self) -> list[str]:
        cfg = self.cfg
        for r in self.replicas.values():
            self.boot(r, False)
        for i in range(cfg.requests):
            if self.rng.random() < 0.7:
                req = Request(f"r{i}", ops.KIND, ops.put(f"k{i}", i))
            else:
                req = Request(f"r{i}", ops.KIND, ops.incr(f"c{i % 3}", i + 1))
            self.requests.append(req)
            self.at(self.rng.randint(0, cfg.fault_window_ms), self.client, req)
        for _ in range(self.rng.randint(0, cfg.faults_max)):
            self.at(
                self.rng.randint(0, cfg.fault_window_ms - 200),
                self.inject,
                self.rng.choice(FAULT_KINDS),
            )
        self.at(cfg.fault_window_ms, self.heal)
        self.at(cfg.fault_window_ms + cfg.settle_ms // 3, self.send_probe, 0)
        end = cfg.fault_window_ms + cfg.settle_ms
        while self._heap and self._heap[0][0] <= end:
            t, _, fn, args = heapq.heappop(self._heap)
            self.now = t
            fn(*args)
        return self.check()

    def check(self) -> list[str]:
        log = [(o, Entry.decode(b, o)) for o, b in enumerate(self.log)]
        accepted = checker.accepted_entries(log)
        acks = [
            checker.Ack(q.id, q.offset, q.writer_id, q.kind, q.payload)
            for q in self.requests
            if q.outcome == "ok"
        ]
        problems = checker.check_acked(acks, accepted)
        end = len(self.log) - 1
        for r in self.replicas.values():
            problems += checker.check_applied(r.name, r.applied, accepted, r.start_offset, end)
            problems += checker.check_monotonic_ts(r.name, r.applied_ts)
        problems += checker.check_digests({r.name: r.digests for r in self.replicas.values()})
        if self.probe is None or self.probe.outcome != "ok":
            problems.append("no progress: the probe was not acknowledged after the faults stopped")
        for r in self.replicas.values():
            if r.core.next_offset != len(self.log):
                problems.append(
                    f"{r.name} stopped at {r.core.next_offset} of {len(self.log)} records")
            if r.mismatches:
                problems.append(f"{r.name} applied own records unlike the log's at "
                                f"{r.mismatches[:5]}")
        if sum(1 for r in self.replicas.values() if r.core.role is not Role.FOLLOWER) > 1:
            problems.append("more than one replica leads at the end")
        return problems


def _restore_in_memory(sm: Any, snap: Any) -> Any:
    """Restore from a snapshot without touching disk (the simulation runs thousands of them)."""
    import pathlib
    import tempfile

    if isinstance(sm, DictKV):
        sm.data = dict(snap._data)
        sm._applied = snap._offset
        return sm
    with tempfile.TemporaryDirectory() as d:
        snap.write(pathlib.Path(d))
        sm.restore(pathlib.Path(d))
    return sm


def run_seed(
    seed: int,
    config: Config = DEFAULT_CONFIG,
    make_sm: Callable[[], Any] = DictKV,
    trace: bool = False,
) -> tuple[list[str], Simulation]:
    sim = Simulation(seed, config, make_sm, trace)
    return sim.run(), sim


def replay_command(seed: int) -> str:
    return f".venv/bin/python -m replog.testing.sim --seed {seed} --trace"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, help="run one seed")
    p.add_argument("--seeds", type=int, default=1000, help="run seeds 0..N-1")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--duckdb", action="store_true", help="use the DuckDB reference machine")
    a = p.parse_args(argv)
    make_sm: Callable[[], Any] = DictKV
    if a.duckdb:
        from replog.testing.kv import DuckKV

        make_sm = DuckKV
    seeds = [a.seed] if a.seed is not None else range(a.first, a.first + a.seeds)
    faults: Counter[str] = Counter()
    failed = 0
    for seed in seeds:
        problems, sim = run_seed(seed, make_sm=make_sm, trace=a.trace)
        faults.update(sim.faults)
        if problems:
            failed += 1
            print(f"seed {seed} FAILED: replay with {replay_command(seed)}")
            for line in problems:
                print("   ", line)
    print(f"{len(seeds)} seeds, {failed} failed, faults: {dict(sorted(faults.items()))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
