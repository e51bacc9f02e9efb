"""W1 (Railgun Example 1): exact sliding-window metrics per event, beside its peers.

    Q1: SELECT SUM(amount), COUNT(*) FROM payments GROUP BY card RANGE 5 MINUTES
    Q2: SELECT AVG(amount) FROM payments GROUP BY merchant RANGE 5 MINUTES

Measures, on one core, over ``pipeline.synthetic`` events (one day of traffic):
1. events/s (closed loop, repeated) and per-event latency p50/p99/p99.9 (open loop at a share
   of the measured rate, coordinated omission corrected, after a warm-up) of the engine one
   event per call, of the engine's batched call (``ingest_many`` over Arrow columns), and of its
   peers in the same run: a naive engine that keeps each key's events and recomputes the window
   per event (the approach of Flink's fraud-detection demo), River's ``utils.TimeRolling`` per
   key, and the offline equivalents (DuckDB window SQL, ``metrics_engine.offline``);
2. the window sweep 5 min → 392 days over the same events spread across 800 days, so that every
   window evicts during the measurement (which starts after 440 days of warm-up): events/s,
   p99/p99.9 and RSS per length (each point in a fresh process);
3. 10 → 120 misaligned windows (one head iterator each, one shared tail), one event per call,
   and at 120 windows also through ``ingest_many`` into Arrow columns.
The batched rows run both ways (values back as lists, and as Arrow columns), and their values
must equal the engine's one event per call (value and type) on the first events.
Every figure also comes as CPU µs per event (process CPU time, the writer thread included).
A parity check makes the run fail if the engine and the naive peer disagree on any value.

Usage: ``.venv/bin/python bench/metrics_w1.py [--quick] [--misaligned-only]`` (the latter runs
part 3 alone, into its own report ``metrics_w1_misaligned``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Report, open_loop, rss_mb, spread  # noqa: E402

Q1 = "SELECT SUM(amount) AS q1_sum, COUNT(*) AS q1_count FROM payments GROUP BY card RANGE {w}"
Q2 = "SELECT AVG(amount) AS q2_avg FROM payments GROUP BY merchant RANGE {w}"
SWEEP = [("5 min", "5 MINUTES", 300_000), ("1 h", "1 HOURS", 3_600_000),
         ("1 day", "1 DAYS", 86_400_000), ("7 days", "7 DAYS", 7 * 86_400_000),
         ("392 days", "392 DAYS", 392 * 86_400_000)]
CACHE_ENTRIES = 50_000  # the state cache budget: state beyond it lives in RocksDB
SEED = 7
OPEN_LOOP_LOAD = 0.3  # arrival rate as a share of the measured throughput


DAY_EVENTS = 500_000  # one day at the thesis's 150-200 M events/year
SWEEP_DAYS = 800  # the sweep's events span this many days: 392-day windows evict too
SWEEP_WARM_SHARE = 0.55  # 440 of the 800 days go by before the measurement starts
BATCH_EVENTS = 10_000  # rows per ingest_many call
DATA = Path(tempfile.gettempdir()) / f"railflow_w1_{DAY_EVENTS}_{SEED}.parquet"


def ensure_data() -> None:
    """One day of synthetic traffic, written once; every process reads its first n events."""
    if not DATA.exists():
        import pyarrow.parquet as pq

        from pipeline.synthetic import generate

        tmp = DATA.with_suffix(".tmp")
        pq.write_table(generate(DAY_EVENTS, SEED), tmp)
        tmp.replace(DATA)


def load_events(n: int, spread_days: int = 0) -> list[tuple[int, dict]]:
    """The first ``n`` events; ``spread_days`` re-stamps them evenly over that many days (in
    order), so long windows fill and evict within ``n`` events."""
    import pyarrow.parquet as pq

    ensure_data()
    rows = pq.read_table(DATA).slice(0, n).to_pylist()
    out = [(r.pop("ts"), r) for r in rows]
    if spread_days:
        t0, step = out[0][0], spread_days * 86_400_000 // max(1, n)
        out = [(t0 + i * step, ev) for i, (_, ev) in enumerate(out)]
    return out


# -- systems under test -------------------------------------------------------------------

class EngineSUT:
    name = "railflow engine"

    def __init__(self, window_text: str, window_ms: int, extra: list[str] | None = None):
        from metrics_engine.engine import Engine

        self.tmp = tempfile.TemporaryDirectory()
        self.eng = Engine(self.tmp.name, cache_entries_max=CACHE_ENTRIES)
        for q in extra if extra is not None else [Q1, Q2]:
            self.eng.define(q.format(w=window_text))
        ing = self.eng.ingest
        self.ingest = lambda item: ing("payments", item[1], item[0])

    def close(self):
        self.eng.close()
        self.tmp.cleanup()


class NaiveSUT:
    """Keeps every event of a key in its window and recomputes the aggregates per event."""

    name = "naive recompute"

    def __init__(self, window_text: str, window_ms: int, extra=None):
        w = window_ms
        cards: dict = defaultdict(list)
        merchants: dict = defaultdict(list)

        def recompute(events: list, t: int):
            s = c = 0
            for ti, a in events:
                if ti > t - w:
                    s += a
                    c += 1
            if len(events) > 2 * c + 8:  # periodic clean-up of expired events
                events[:] = [e for e in events if e[0] > t - w]
            return s, c

        def ingest(item):
            t, ev = item
            a = ev["amount"]
            lc = cards[ev["card"]]
            lc.append((t, a))
            s, c = recompute(lc, t)
            lm = merchants[ev["merchant"]]
            lm.append((t, a))
            ms, mc = recompute(lm, t)
            return {"q1_sum": s, "q1_count": c, "q2_avg": ms / mc}

        self.ingest = ingest

    def close(self):
        pass


class RiverSUT:
    """River's ``utils.TimeRolling`` around ``stats.Sum`` and ``stats.Mean``, per key."""

    name = "river TimeRolling"

    def __init__(self, window_text: str, window_ms: int, extra=None):
        import datetime as dt
        import warnings

        from river import stats, utils

        warnings.filterwarnings("ignore", category=DeprecationWarning)
        period = dt.timedelta(milliseconds=window_ms)
        sums: dict = {}
        counts: dict = {}
        means: dict = {}

        def rolling(table, key, cls):
            r = table.get(key)
            if r is None:
                r = table[key] = utils.TimeRolling(cls, period=period)
            return r

        def ingest(item):
            t, ev = item
            when = datetime.fromtimestamp(t / 1000, UTC).replace(tzinfo=None)
            a = ev["amount"]
            s = rolling(sums, ev["card"], stats.Sum)
            s.update(a, t=when)
            c = rolling(counts, ev["card"], stats.Mean)  # Count is not revertible: Mean.n
            c.update(a, t=when)
            m = rolling(means, ev["merchant"], stats.Mean)
            m.update(a, t=when)
            return {"q1_sum": s.get(), "q1_count": int(c.n), "q2_avg": m.get()}

        self.ingest = ingest

    def close(self):
        pass


SUTS = {"engine": EngineSUT, "naive": NaiveSUT, "river": RiverSUT}


def cpu_us(rates: dict) -> float:
    return 1e6 / rates["median"]


def run_batched(n: int, repeats: int, arrow: bool = False, queries: list[str] | None = None,
                batch: int = BATCH_EVENTS, check: int = 0) -> dict:
    """In a fresh process: the engine's ``ingest_many`` over Arrow columns, batch by batch,
    its values back as lists, or (``arrow``) as Arrow columns. ``check``: the values of the
    first ``check`` events (first repeat) must equal, value and type, those the engine gives
    one event per call (itself checked against the naive peer by ``parity``)."""
    import gc

    import pyarrow.parquet as pq

    from metrics_engine.engine import Engine

    ensure_data()
    table = pq.read_table(DATA).slice(0, n)
    ts = table.column("ts").to_numpy()
    cols = table.drop_columns(["ts"])
    batches = [(ts[i:i + batch], cols.slice(i, batch)) for i in range(0, n, batch)]
    texts = queries if queries is not None else [Q1.format(w="5 MINUTES"),
                                                  Q2.format(w="5 MINUTES")]
    gc.freeze()
    rates, cpu_rates, kept = [], [], []
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            eng = Engine(tmp, cache_entries_max=CACHE_ENTRIES)
            for q in texts:
                eng.define(q)
            warm = len(batches) // 5
            for t, c in batches[:warm]:
                out = eng.ingest_many("payments", t, c, arrow=arrow)
                if r == 0 and len(kept) * batch < check:
                    kept.append(out)
            done = 0
            t0, c0 = time.perf_counter(), time.process_time()
            for t, c in batches[warm:]:
                out = eng.ingest_many("payments", t, c, arrow=arrow)
                done += len(next(iter(out.values())))
                if r == 0 and len(kept) * batch < check:
                    kept.append(out)  # a reference: the check reads it after the clock stops
            rates.append(done / (time.perf_counter() - t0))
            cpu_rates.append(done / max(1e-9, time.process_time() - c0))
            eng.close()
    row = {"events_per_s": spread(rates), "events_per_cpu_s": spread(cpu_rates),
           "cpu_us_per_event": cpu_us(spread(cpu_rates)), "rss_mb": rss_mb()}
    if check:
        row["parity_mismatches"] = per_call_mismatches(kept, texts, min(check, n))
    return row


def per_call_mismatches(outs: list[dict], texts: list[str], n: int) -> int:
    """Events among the first ``n`` whose batched values (lists or Arrow columns, in order)
    differ in value or type from the engine's one event per call."""
    from metrics_engine.engine import Engine

    got: dict[str, list] = {}
    for out in outs:
        for k, v in out.items():
            got.setdefault(k, []).extend(v if isinstance(v, list) else v.to_pylist())
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(tmp, cache_entries_max=CACHE_ENTRIES)
        for q in texts:
            eng.define(q)
        for i, (t, ev) in enumerate(load_events(n)):
            want = eng.ingest("payments", ev, t)
            bad += any(k not in got or got[k][i] != w or type(got[k][i]) is not type(w)
                       for k, w in want.items())
        eng.close()
    return bad


def run_point(args) -> dict:
    """In a fresh process: throughput, then open-loop latency, then RSS, for one system."""
    import gc

    sut_name, window_text, window_ms, n, repeats, extra, spread_days = args
    events = load_events(n, spread_days)
    gc.freeze()  # the prepared events are input, not the system's garbage
    cut = int(n * SWEEP_WARM_SHARE) if spread_days else n // 5
    warm, rest = events[:cut], events[cut:]
    half = len(rest) // 2
    rates, cpu_rates = [], []
    rss_before = rss_mb()
    for _ in range(repeats):
        sut = SUTS[sut_name](window_text, window_ms, extra)
        for item in warm:
            sut.ingest(item)
        t0, c0 = time.perf_counter(), time.process_time()
        for item in rest[:half]:
            sut.ingest(item)
        rates.append(half / (time.perf_counter() - t0))
        cpu_rates.append(half / max(1e-9, time.process_time() - c0))
        if _ < repeats - 1:
            sut.close()
    median_rate = sorted(rates)[len(rates) // 2]
    lat = open_loop(sut.ingest, rest[half:], rate_per_s=median_rate * OPEN_LOOP_LOAD,
                    warmup=len(rest) // 20)
    rss = rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    sut.close()
    return {"events_per_s": spread(rates), "events_per_cpu_s": spread(cpu_rates),
            "cpu_us_per_event": cpu_us(spread(cpu_rates)), **lat,
            "rss_mb": rss, "peak_rss_mb": peak, "rss_growth_mb": rss - rss_before}


def in_child(pool, args) -> dict:
    return pool.apply(run_point, (args,))


def parity(n: int) -> int:
    """Values of the engine and the naive peer on the first ``n`` events; returns mismatches."""
    events = load_events(n)
    a, b = EngineSUT("5 MINUTES", 300_000), NaiveSUT("5 MINUTES", 300_000)
    bad = 0
    for item in events:
        x, y = a.ingest(item), b.ingest(item)
        bad += any(x[k] != y[k] for k in y)
    a.close()
    return bad


def duckdb_offline(n: int, repeats: int) -> dict:
    import duckdb
    import pyarrow.parquet as pq

    table = pq.read_table(DATA).slice(0, n)
    con = duckdb.connect()
    con.register("payments", table)
    frame = "ORDER BY ts RANGE BETWEEN 299999 PRECEDING AND CURRENT ROW"
    sql = f"""SELECT SUM(amount) OVER (PARTITION BY card {frame}),
      COUNT(*) OVER (PARTITION BY card {frame}),
      AVG(amount) OVER (PARTITION BY merchant {frame}) FROM payments"""
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        con.execute(sql).fetchall()
        rates.append(n / (time.perf_counter() - t0))
    return {"events_per_s": spread(rates), "cpu_us_per_event": 1e6 / spread(rates)["median"]}


def offline_compute(n: int, repeats: int) -> dict:
    from metrics_engine import offline

    rows = [dict(ev, ts=t) for t, ev in load_events(n)]
    texts = [Q1.format(w="5 MINUTES"), Q2.format(w="5 MINUTES")]
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _v in offline.compute(texts, rows):
            pass
        rates.append(n / (time.perf_counter() - t0))
    return {"events_per_s": spread(rates), "cpu_us_per_event": 1e6 / spread(rates)["median"]}


def misaligned_queries(k: int) -> list[str]:
    return [f"SELECT SUM(amount) AS s{i}, COUNT(*) AS c{i} FROM payments GROUP BY card "
            f"RANGE {300 + 7 * i} SECONDS" for i in range(k)]


def misaligned_only(quick: bool) -> int:
    """Part 3 alone: 10 → 120 misaligned windows, each point in a fresh process."""
    n_misaligned = 3_000 if quick else 20_000
    ks = [10, 120] if quick else [10, 30, 60, 120]
    rep = Report("metrics_w1_misaligned", quick)
    ensure_data()
    misaligned, batched = {}, {}
    with mp.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        for k in ks:
            r = in_child(pool, ("engine", "", 0, n_misaligned, 1, misaligned_queries(k), 0))
            misaligned[k] = r
            rep.add(part="misaligned", system=f"engine {k} windows ({k + 1} iterators)", **r)
        k = max(ks)
        batched[k] = misaligned_batched(pool, k, n_misaligned, 1)
        rep.add(part="misaligned", system=f"engine {k} windows, ingest_many "
                f"({MISALIGNED_BATCH:,} rows, Arrow columns)", **batched[k])
    misaligned_target(rep, misaligned, batched)
    rep.write(["part", "system", "events_per_s", "events_per_cpu_s", "cpu_us_per_event",
               "p50_us", "p99_us", "p999_us", "rss_mb", "parity_mismatches"])
    return 1 if batched[max(ks)]["parity_mismatches"] else 0


MISALIGNED_BATCH = 500  # rows per ingest_many call at 120 windows (a fifth warms up, as per call)


def misaligned_batched(pool, k: int, n: int, repeats: int) -> dict:
    """``k`` misaligned windows through ``ingest_many`` into Arrow columns, in a fresh
    process; every value checked against the engine one event per call."""
    return pool.apply(run_batched, (n, repeats, True, misaligned_queries(k), MISALIGNED_BATCH,
                                    n))


def misaligned_target(rep: Report, per_call: dict[int, dict], batched: dict[int, dict]) -> None:
    """P3's 120 misaligned windows: the better of one event per call and the batched call
    into columns, met only at 120 windows with every batched value equal to the per-call."""
    k = max(per_call)
    one = per_call[k]["events_per_s"]["median"]
    b = batched.get(k)
    many = b["events_per_s"]["median"] if b else 0.0
    bad = b["parity_mismatches"] if b else 0
    note = (f"{k} windows: one event per call {one:,.0f}/s "
            f"({per_call[k]['cpu_us_per_event']:.1f} CPU us/event)")
    if b:
        note += (f", ingest_many into columns {many:,.0f}/s ({b['cpu_us_per_event']:.1f} CPU "
                 f"us/event, {bad} values differ from per call)")
    rep.target("P3_misaligned", max(one, many), "events/s", 200_000, note=note)
    if k < 120 or bad:
        rep.targets["P3_misaligned"]["met"] = False


def main() -> int:
    ap = argparse.ArgumentParser(description="W1 metrics benchmark")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--misaligned-only", action="store_true",
                    help="only the 10 → 120 misaligned windows part")
    args = ap.parse_args()
    if args.misaligned_only:
        return misaligned_only(args.quick)
    quick = args.quick
    n = 10_000 if quick else 200_000
    n_sweep = 6_000 if quick else 100_000
    n_misaligned = 3_000 if quick else 20_000
    repeats = 2 if quick else 3
    ks = [10, 120] if quick else [10, 30, 60, 120]
    n_batched = 50_000 if quick else 1_000_000
    misaligned: dict[int, dict] = {}
    rep = Report("metrics_w1", quick)
    ctx = mp.get_context("spawn")

    ensure_data()
    mismatches = parity(2_000 if quick else 20_000)
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        base = {}
        for sut in ("engine", "naive", "river"):
            r = in_child(pool, (sut, "5 MINUTES", 300_000, n, repeats, None, 0))
            base[sut] = r
            rep.add(part="W1 5 min", system=SUTS[sut].name + " (one event per call)", **r)
        check = 20_000 if quick else 100_000
        batched = pool.apply(run_batched, (n_batched, repeats, False, None, BATCH_EVENTS, check))
        rep.add(part="W1 5 min",
                system=f"railflow engine ingest_many ({BATCH_EVENTS:,} rows, lists)", **batched)
        columns = pool.apply(run_batched, (n_batched, repeats, True, None, BATCH_EVENTS, check))
        rep.add(part="W1 5 min",
                system=f"railflow engine ingest_many ({BATCH_EVENTS:,} rows, Arrow columns)",
                **columns)
        eng_rate = base["engine"]["events_per_s"]["median"]
        eng_cpu_rate = base["engine"]["events_per_cpu_s"]["median"]
        for row in rep.results:
            row["ratio_vs_engine"] = row["events_per_s"]["median"] / eng_rate
            row["cpu_ratio_vs_engine"] = row["events_per_cpu_s"]["median"] / eng_cpu_rate
        rep.add(part="W1 offline", system="duckdb window SQL", **duckdb_offline(n, repeats))
        rep.add(part="W1 offline", system="metrics_engine.offline", **offline_compute(n, repeats))

        sweep = {}
        for label, text, ms in SWEEP:
            r = in_child(pool, ("engine", text, ms, n_sweep, 1, None, SWEEP_DAYS))
            sweep[label] = r
            rep.add(part="window sweep", system=f"engine RANGE {label}", **r)
        for k in ks:
            r = in_child(pool, ("engine", "", 0, n_misaligned, 1, misaligned_queries(k), 0))
            misaligned[k] = r
            rep.add(part="misaligned", system=f"engine {k} windows ({k + 1} iterators)", **r)
        k = max(ks)
        misaligned_many = {k: misaligned_batched(pool, k, n_misaligned, 1)}
        rep.add(part="misaligned", system=f"engine {k} windows, ingest_many "
                f"({MISALIGNED_BATCH:,} rows, Arrow columns)", **misaligned_many[k])

    lat_flat = sweep["392 days"]["p99_us"] / max(1, sweep["5 min"]["p99_us"])
    lat_flat_999 = sweep["392 days"]["p999_us"] / max(1, sweep["5 min"]["p999_us"])
    rss_flat = sweep["392 days"]["rss_mb"] / sweep["5 min"]["rss_mb"]
    worst_sweep_p999 = max(r["p999_us"] for r in sweep.values())
    rep.add(part="flatness", system="392 days / 5 min (both evicting)", p99_ratio=lat_flat,
            p999_ratio=lat_flat_999, rss_ratio=rss_flat, parity_mismatches=mismatches)
    batched_bad = batched["parity_mismatches"] + columns["parity_mismatches"]
    rep.target("P3", columns["events_per_s"]["median"], "events/s", 1_000_000,
               note=f"ingest_many into Arrow columns, {columns['cpu_us_per_event']:.2f} CPU "
                    f"us/event (into lists {batched['events_per_s']['median']:,.0f}/s, "
                    f"{batched['cpu_us_per_event']:.2f} us); {batched_bad} batched values "
                    f"differ from one event per call")
    if batched_bad:
        rep.targets["P3"]["met"] = False
    rep.target("P3_per_call", eng_rate, "events/s", 300_000,
               note=f"{eng_cpu_rate:,.0f} events per CPU-second, "
                    f"{1e6 / eng_cpu_rate:.2f} CPU us/event")
    rep.target("P3_p999", base["engine"]["p999_us"], "us", 20, higher_is_better=False)
    rep.target("P3_sweep_p999", worst_sweep_p999, "us", 20, higher_is_better=False,
               note="the worst p99.9 over the sweep's window lengths")
    rep.target("P3_flat_latency", max(lat_flat, lat_flat_999), "x", 1.1,
               higher_is_better=False, note=f"p99 x{lat_flat:.2f}, p99.9 x{lat_flat_999:.2f}")
    rep.target("P3_flat_rss", rss_flat, "x", 1.1, higher_is_better=False)
    misaligned_target(rep, misaligned, misaligned_many)
    rep.write(["part", "system", "events_per_s", "events_per_cpu_s", "cpu_us_per_event",
               "ratio_vs_engine", "cpu_ratio_vs_engine", "p50_us", "p99_us", "p999_us",
               "rss_mb", "p99_ratio", "p999_ratio", "rss_ratio", "parity_mismatches"])
    bad_many = batched_bad + misaligned_many[max(misaligned_many)]["parity_mismatches"]
    if mismatches or bad_many:
        print(f"PARITY FAILED: {mismatches} events differ between the engine and the naive "
              f"peer, {bad_many} between the batched call and one event per call")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
