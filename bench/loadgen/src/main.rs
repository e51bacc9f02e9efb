//! railflow-loadgen: an open-loop HTTP/1.1 load generator for `bench/api_w3.py`.
//!
//! Requests are due at a fixed arrival rate whatever the server does; each latency runs from
//! the request's *intended* start to the last byte of its answer (coordinated omission
//! corrected: a request that waits for a free connection, or behind a stalled server, counts
//! the wait), recorded in an HdrHistogram after an uncounted warm-up.
//!
//! It costs the machine it measures as little CPU as it can (issue 12: under 5 % of a core
//! at 2,000/s), and reports how much it took (`cpu_us_per_request`, from `getrusage`). One
//! thread, no runtime, no allocation per request: it sleeps until the next request is due
//! (`clock_nanosleep` on an absolute time), at most once a tick (`--tick-us`, 1 ms by
//! default: a wakeup costs more than a request), and at that wakeup sends every request due
//! (one `send` each, built into a reused buffer) and, every 10 ms or when half the pool is
//! busy, reads every answer that came since (one `epoll_pwait2` that does not wait, one
//! `recvmsg` per answer). An answer does not wake it: its end time is the kernel's receive
//! time of its last byte (`SO_TIMESTAMPNS`), not the time it was read, so reading late loses
//! no accuracy. Only when every connection is busy and requests wait, and while the last
//! answers come in, does it wait on the connections.
//!
//! Connections are taken in turn (first in, first out), so none sits idle long enough for the
//! server's keep-alive timeout at the rates we run. A connection the server closed while idle
//! is replaced when its end is read, and a request sent on one that the server had closed
//! (the send fails, or the answer ends before its first byte) is sent again once on a fresh
//! connection; both count in `reconnects`: such a request never reached the server's
//! handler, and an order's event id makes a repeat harmless anyway. Any other failure is an
//! error, and its connection is replaced, so the pool never shrinks.
//!
//! Bodies come from a file, one per line; `@ID@` in a line is replaced by `<tag>-<n>` (n is
//! the request's number), so every order has its own event id. The result is one JSON object
//! on stdout: counts, percentiles in microseconds, errors, the first run's decisions, the
//! generator's own CPU (user and system seconds, and µs per request sent), how late its
//! requests left (`send_late_*`), how often it waited (`wakeups`), and how many answers had
//! no kernel receive time (`rx_stamps_missing`: then the time they were read counts).
//!
//! Usage: railflow-loadgen --target 127.0.0.1:8001 [--target ...] --path /v1/events
//!        --key KEY --rate 1000 --duration-s 300 --warmup-s 30 --connections 48
//!        --bodies FILE --tag TAG [--tick-us 1000]

mod http;
mod sys;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::TcpStream;

use hdrhistogram::Histogram;

use http::{Answer, Requests};
use sys::Read;

const LATENCY_US_MAX: u64 = 60_000_000;
const READ_CHUNK_BYTES: usize = 16 * 1024;
const START_DELAY_MS: u64 = 200;
const READ_EVERY_NS: u64 = 10_000_000;
/// The least time between two wakeups: at most 1,000 a second. A wakeup costs ~10 µs of CPU
/// on a virtual machine (the sleep, the timer, two context switches), which one request a
/// wakeup at 2,000/s would double; the price is up to half a millisecond of the generator's
/// own delay above 1,000/s, counted in each latency and shown in `send_late_*`.
const TICK_US_DEFAULT: u64 = 1_000;

struct Args {
    targets: Vec<String>,
    path: String,
    key: String,
    rate: f64,
    duration_s: f64,
    warmup_s: f64,
    connections: usize,
    bodies: String,
    tag: String,
    tick_us: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        targets: vec![],
        path: "/v1/events".into(),
        key: String::new(),
        rate: 100.0,
        duration_s: 10.0,
        warmup_s: 0.0,
        connections: 48,
        bodies: String::new(),
        tag: "lg".into(),
        tick_us: TICK_US_DEFAULT,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let (k, v) = (argv[i].as_str(), argv.get(i + 1).cloned().unwrap_or_default());
        match k {
            "--target" => a.targets.push(v),
            "--path" => a.path = v,
            "--key" => a.key = v,
            "--rate" => a.rate = v.parse().expect("--rate"),
            "--duration-s" => a.duration_s = v.parse().expect("--duration-s"),
            "--warmup-s" => a.warmup_s = v.parse().expect("--warmup-s"),
            "--connections" => a.connections = v.parse().expect("--connections"),
            "--bodies" => a.bodies = v,
            "--tag" => a.tag = v,
            "--tick-us" => a.tick_us = v.parse().expect("--tick-us"),
            _ => panic!("unknown argument {k}"),
        }
        i += 2;
    }
    assert!(!a.targets.is_empty(), "--target is required");
    assert!(a.rate > 0.0, "--rate must be positive");
    a
}

/// A request on its connection, waiting for its answer.
struct Pending {
    n: u64,
    /// When it was due (monotonic ns): its latency starts here.
    intended_ns: u64,
    /// When it left (monotonic ns).
    sent_ns: u64,
    /// Sent again on a fresh connection already (a second failure is an error).
    resent: bool,
    /// The kernel's receive time of the last bytes read (monotonic ns).
    received_ns: u64,
}

struct Conn {
    target: usize,
    /// None: it could not be replaced (one fewer in the pool).
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    pending: Option<Pending>,
}

/// How an exchange failed: `Stale` when nothing of an answer came back (the server had closed
/// the kept-alive connection before it read the request), `Broken` otherwise.
enum Failure {
    Stale(io::Error),
    Broken(io::Error),
}

struct Generator {
    targets: Vec<String>,
    requests: Requests,
    conns: Vec<Conn>,
    epoll: sys::Epoll,
    /// Idle connections, in the order they became idle.
    free: VecDeque<usize>,
    in_flight: usize,
    /// Where each request is built (reused).
    out: Vec<u8>,
    ready: Vec<usize>,
    warm_end_ns: u64,
    counts_decisions: bool,
    hist: Histogram<u64>,
    /// How late each request left against its intended start (the generator's own delay,
    /// part of its latency): a wakeup's latency, the tick, a busy machine, no free connection.
    late_hist: Histogram<u64>,
    reconnects: u64,
    errors: BTreeMap<String, u64>,
    decisions: BTreeMap<Vec<u8>, u64>,
    stamps_missing: u64,
}

impl Generator {
    fn replace(&mut self, key: usize) -> io::Result<()> {
        let conn = &mut self.conns[key];
        conn.stream = None; // closing it takes it out of the epoll set
        conn.buf.clear();
        let stream = sys::connect(&self.targets[conn.target])?;
        self.epoll.add(&stream, key)?;
        conn.stream = Some(stream);
        Ok(())
    }

    /// Send request `p.n` on connection `key` (taken from `free`).
    fn dispatch(&mut self, key: usize, mut p: Pending) {
        loop {
            let conn = &mut self.conns[key];
            self.requests.build(p.n, conn.target, &mut self.out);
            let stream = conn.stream.as_ref().expect("a free connection has a stream");
            match sys::send_all(stream, &self.out) {
                Ok(()) => {
                    p.sent_ns = sys::monotonic_ns();
                    if !p.resent && p.intended_ns >= self.warm_end_ns {
                        let late = (p.sent_ns.saturating_sub(p.intended_ns)) / 1_000;
                        self.late_hist.saturating_record(late.clamp(1, LATENCY_US_MAX));
                    }
                    conn.pending = Some(p);
                    self.in_flight += 1;
                    return;
                }
                Err(e) => match self.retry(key, &mut p, Failure::Stale(e)) {
                    true => continue,
                    false => return,
                },
            }
        }
    }

    /// After a failure on connection `key` carrying `p`: true when `p` should go again on
    /// the (replaced) connection; otherwise the failure is counted and the connection is
    /// replaced and freed (or dropped if it cannot be).
    fn retry(&mut self, key: usize, p: &mut Pending, failure: Failure) -> bool {
        let e = match failure {
            Failure::Stale(_) if !p.resent => {
                self.reconnects += 1;
                match self.replace(key) {
                    Ok(()) => {
                        p.resent = true;
                        return true;
                    }
                    Err(e) => e,
                }
            }
            Failure::Stale(e) | Failure::Broken(e) => e,
        };
        *self.errors.entry(format!("{:?}", e.kind())).or_default() += 1;
        if self.replace(key).is_ok() {
            self.free.push_back(key);
        } else {
            self.conns[key].stream = None;
        }
        false
    }

    /// Read what connection `key` has: finish its answer, or find that it failed.
    fn on_readable(&mut self, key: usize, offset_ns: i64) {
        loop {
            let conn = &mut self.conns[key];
            let Some(stream) = conn.stream.as_ref() else { return };
            let read = sys::recv_stamped(stream, &mut conn.buf, READ_CHUNK_BYTES);
            let Some(p) = conn.pending.as_mut() else {
                // Idle: the server closed it (or said something unasked, which is dropped).
                conn.buf.clear();
                match read {
                    Ok(Read::Bytes(..)) => continue,
                    Ok(Read::Empty) => return,
                    Ok(Read::End) | Err(_) => {
                        self.reconnects += 1;
                        self.free.retain(|&k| k != key);
                        if self.replace(key).is_ok() {
                            self.free.push_back(key);
                        }
                        return;
                    }
                }
            };
            let failure = match read {
                Ok(Read::Empty) => return,
                Ok(Read::Bytes(stamp)) => {
                    p.received_ns = match stamp {
                        Some(real) => (real as i64 - offset_ns) as u64,
                        None => {
                            self.stamps_missing += 1;
                            sys::monotonic_ns()
                        }
                    };
                    match http::answer(&conn.buf) {
                        Answer::Partial => continue,
                        Answer::Complete(status, body) => {
                            let p = conn.pending.take().expect("pending");
                            self.in_flight -= 1;
                            self.record(key, &p, status, body);
                            self.conns[key].buf.clear();
                            self.free.push_back(key);
                            return;
                        }
                        Answer::Invalid => Failure::Broken(io::ErrorKind::InvalidData.into()),
                    }
                }
                Ok(Read::End) if conn.buf.is_empty() => Failure::Stale(io::ErrorKind::UnexpectedEof.into()),
                Ok(Read::End) => Failure::Broken(io::ErrorKind::UnexpectedEof.into()),
                Err(e) if conn.buf.is_empty() => Failure::Stale(e),
                Err(e) => Failure::Broken(e),
            };
            let mut p = conn.pending.take().expect("pending");
            self.in_flight -= 1;
            if self.retry(key, &mut p, failure) {
                self.dispatch(key, p);
            }
            return;
        }
    }

    fn record(&mut self, key: usize, p: &Pending, status: u16, body: std::ops::Range<usize>) {
        if p.intended_ns < self.warm_end_ns {
            return;
        }
        if status != 200 {
            *self.errors.entry(format!("http {status}")).or_default() += 1;
            return;
        }
        // The answer cannot have come before its request left (guards a clock mismatch).
        let us = (p.received_ns.max(p.sent_ns) - p.intended_ns) / 1_000;
        self.hist.saturating_record(us.clamp(1, LATENCY_US_MAX));
        if self.counts_decisions {
            let d = http::decision(&self.conns[key].buf[body]);
            match self.decisions.get_mut(d) {
                Some(n) => *n += 1,
                None => {
                    self.decisions.insert(d.to_vec(), 1);
                }
            }
        }
    }

    /// Wait for readable connections until `until_ns` (Some(0): not at all) and read them.
    fn read_ready(&mut self, until_ns: Option<u64>) {
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.epoll.ready(until_ns).expect("epoll_pwait2"));
        let offset_ns = sys::realtime_offset_ns();
        for &key in &ready {
            self.on_readable(key, offset_ns);
        }
        self.ready = ready;
    }
}

fn main() {
    let args = parse_args();
    let lines = std::fs::read_to_string(&args.bodies).expect("--bodies file");
    let requests = Requests::new(&lines, &args.targets, &args.path, &args.key, &args.tag);
    let total = (args.rate * (args.warmup_s + args.duration_s)).round() as u64;
    let pool = args.connections * args.targets.len();
    let mut g = Generator {
        targets: args.targets.clone(),
        requests,
        conns: Vec::with_capacity(pool),
        epoll: sys::Epoll::new(pool).expect("epoll_create1"),
        free: VecDeque::with_capacity(pool),
        in_flight: 0,
        out: Vec::with_capacity(8192),
        ready: Vec::with_capacity(pool),
        warm_end_ns: 0,
        counts_decisions: args.path == "/v1/events",
        hist: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).unwrap(),
        late_hist: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).unwrap(),
        reconnects: 0,
        errors: BTreeMap::new(),
        decisions: BTreeMap::new(),
        stamps_missing: 0,
    };
    for key in 0..pool {
        let target = key % args.targets.len();
        let stream = sys::connect(&args.targets[target]).expect("connect");
        g.epoll.add(&stream, key).expect("epoll_ctl");
        g.conns.push(Conn { target, stream: Some(stream), buf: Vec::with_capacity(READ_CHUNK_BYTES), pending: None });
        g.free.push_back(key);
    }
    sys::no_timer_slack();

    let interval_ns = 1e9 / args.rate;
    let start_ns = sys::monotonic_ns() + START_DELAY_MS * 1_000_000;
    g.warm_end_ns = start_ns + (args.warmup_s * 1e9) as u64;
    let due_ns = |i: u64| (i as f64 * interval_ns) as u64;
    // Wakeups at least a tick apart: a request due sooner after the last wakeup goes at the
    // next one, a tick after it, with every other request due by then (each still timed from
    // its own intended start). At rates up to one request a tick each goes at its due time.
    let tick_ns = args.tick_us * 1_000;
    let mut planned_ns: Option<u64> = None; // the next wakeup, once planned
    let mut last_wake_ns = 0u64; // the last planned wakeup that came
    let mut waiting: VecDeque<u64> = VecDeque::new(); // due, no free connection yet
    let mut next = 0u64;
    let mut send_end_ns = None;
    let mut wakeups = 0u64;
    let mut last_read_ns = 0u64;
    loop {
        let now = sys::monotonic_ns();
        if let Some(at) = planned_ns.filter(|&at| now >= at) {
            (last_wake_ns, planned_ns) = (at, None);
        }
        // Answers keep their receive time until read: read them in batches, when the pool
        // runs low or every READ_EVERY_NS (a connection the server closed is found then).
        if g.free.len() * 2 < pool || now >= last_read_ns + READ_EVERY_NS {
            g.read_ready(Some(0));
            last_read_ns = now;
        }
        while next < total && start_ns + due_ns(next) <= now {
            waiting.push_back(next);
            next += 1;
        }
        while !waiting.is_empty() {
            let Some(key) = g.free.pop_front() else { break };
            let n = waiting.pop_front().unwrap();
            let p = Pending { n, intended_ns: start_ns + due_ns(n), sent_ns: 0, resent: false, received_ns: 0 };
            g.dispatch(key, p);
        }
        if next == total && waiting.is_empty() {
            send_end_ns.get_or_insert_with(sys::monotonic_ns);
            if g.in_flight == 0 {
                break;
            }
        }
        assert!(g.in_flight > 0 || !g.free.is_empty() || next < total, "no connection left");
        let wake_at = (next < total)
            .then(|| *planned_ns.get_or_insert_with(|| (start_ns + due_ns(next)).max(last_wake_ns + tick_ns)));
        wakeups += 1;
        match wake_at {
            // Requests wait for a connection, or the last answers are due: answers wake it.
            _ if !waiting.is_empty() || next == total => g.read_ready(wake_at),
            Some(at) => sys::sleep_until(at),
            None => unreachable!(),
        }
    }

    let due_end_ns = start_ns + due_ns(total);
    let (cpu_user_s, cpu_sys_s) = sys::cpu_seconds();
    let lag_s = send_end_ns.unwrap_or(due_end_ns).saturating_sub(due_end_ns) as f64 / 1e9;
    let (h, late) = (&g.hist, &g.late_hist);
    let map = |m: &BTreeMap<String, u64>| {
        let items: Vec<String> = m.iter().map(|(k, v)| format!("{:?}: {}", k, v)).collect();
        format!("{{{}}}", items.join(", "))
    };
    let decisions: BTreeMap<String, u64> =
        g.decisions.iter().map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), *v)).collect();
    println!(
        "{{\"sent\": {}, \"count\": {}, \"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \
         \"max_us\": {}, \"min_us\": {}, \"errors\": {}, \"decisions\": {}, \
         \"reconnects\": {}, \"send_lag_s\": {:.3}, \"cpu_user_s\": {:.6}, \"cpu_sys_s\": {:.6}, \
         \"cpu_us_per_request\": {:.1}, \"tick_us\": {}, \"send_late_p50_us\": {}, \
         \"send_late_p99_us\": {}, \"send_late_max_us\": {}, \"wakeups\": {}, \
         \"rx_stamps_missing\": {}}}",
        total,
        h.len(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.min(),
        map(&g.errors),
        map(&decisions),
        g.reconnects,
        lag_s,
        cpu_user_s,
        cpu_sys_s,
        (cpu_user_s + cpu_sys_s) * 1e6 / total.max(1) as f64,
        args.tick_us,
        late.value_at_quantile(0.50),
        late.value_at_quantile(0.99),
        late.max(),
        wakeups,
        g.stamps_missing
    );
}
