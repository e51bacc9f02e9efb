//! railflow-loadgen: an open-loop HTTP/1.1 load generator for `bench/api_w3.py`.
//!
//! Requests are due at a fixed arrival rate whatever the server does; each latency runs from
//! the request's *intended* start to the last byte of its answer (coordinated omission
//! corrected: a request that waits for a free connection, or behind a stalled server, counts
//! the wait), recorded in an HdrHistogram after an uncounted warm-up. Everything runs on one
//! thread, one single-threaded tokio runtime that owns every connection and wakes at each due
//! time through a `timerfd` armed at that absolute time (nanosecond resolution, unlike the
//! runtime's 1 ms timer wheel), so no other thread wakes it and no wakeup is spent on a
//! time nothing is due: requests found due at a wakeup all go at once. The generator costs
//! the machine it measures as little CPU as it can, and reports how much it took
//! (`cpu_us_per_request`, from `getrusage`).
//!
//! Connections are taken in turn (first in, first out), so none sits idle long enough for the
//! server's keep-alive timeout at the rates we run. A request whose connection the server
//! had closed (the write fails, or the answer ends before its first byte) is sent again once
//! on a fresh connection and counted in `reconnects`: it never reached the server's handler,
//! and an order's event id makes a repeat harmless anyway. Any other failure is an error, and
//! its connection is replaced, so the pool never shrinks.
//!
//! Bodies come from a file, one per line; `@ID@` in a line is replaced by `<tag>-<n>` (n is
//! the request's number), so every order has its own event id. The result is one JSON object
//! on stdout: counts, percentiles in microseconds, errors, the first run's decisions and the
//! generator's own CPU (user and system seconds, and µs per request sent).
//!
//! Usage: railflow-loadgen --target 127.0.0.1:8001 [--target ...] --path /v1/events
//!        --key KEY --rate 1000 --duration-s 300 --warmup-s 30 --connections 48
//!        --bodies FILE --tag TAG

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const LATENCY_US_MAX: u64 = 60_000_000;
const READ_CHUNK_BYTES: usize = 16 * 1024;
const START_DELAY_MS: u64 = 200;

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
        tick_us: 0,
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

struct Conn {
    target: usize,
    stream: TcpStream,
    buf: Vec<u8>,
}

#[derive(Default)]
struct Stats {
    reconnects: u64,
    errors: BTreeMap<String, u64>,
    decisions: BTreeMap<Vec<u8>, u64>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> usize {
    for line in head.split(|&b| b == b'\n') {
        if line.len() > 15 && line[..15].eq_ignore_ascii_case(b"content-length:") {
            let v = std::str::from_utf8(&line[15..]).unwrap_or("0").trim();
            return v.parse().unwrap_or(0);
        }
    }
    0
}

/// How an exchange failed: `Stale` when nothing of an answer came back (the server had closed
/// the kept-alive connection before it read the request), `Broken` otherwise.
enum Failure {
    Stale(io::Error),
    Broken(io::Error),
}

async fn connect(target: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(target).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Read more of an answer into `buf` (no zeroed scratch buffer per request).
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.reserve(READ_CHUNK_BYTES);
    stream.read_buf(buf).await
}

/// Send one request on a kept-alive connection and read its answer into `conn.buf`:
/// (status, where its body lies in `conn.buf`).
async fn exchange(conn: &mut Conn, request: &[u8]) -> Result<(u16, std::ops::Range<usize>), Failure> {
    conn.stream.write_all(request).await.map_err(Failure::Stale)?;
    conn.buf.clear();
    let head_end = loop {
        let seen = conn.buf.len();
        match read_more(&mut conn.stream, &mut conn.buf).await {
            Ok(0) if conn.buf.is_empty() => return Err(Failure::Stale(io::ErrorKind::UnexpectedEof.into())),
            Ok(0) => return Err(Failure::Broken(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) if conn.buf.is_empty() => return Err(Failure::Stale(e)),
            Err(e) => return Err(Failure::Broken(e)),
        }
        // Only the new bytes (and the 3 before them) can complete the head.
        let from = seen.saturating_sub(3);
        if let Some(at) = find(&conn.buf[from..], b"\r\n\r\n") {
            break from + at + 4;
        }
    };
    if conn.buf.len() < 12 {
        return Err(Failure::Broken(io::ErrorKind::InvalidData.into()));
    }
    let status: u16 = std::str::from_utf8(&conn.buf[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Failure::Broken(io::ErrorKind::InvalidData.into()))?;
    let length = content_length(&conn.buf[..head_end]);
    while conn.buf.len() < head_end + length {
        let n = read_more(&mut conn.stream, &mut conn.buf).await.map_err(Failure::Broken)?;
        if n == 0 {
            return Err(Failure::Broken(io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok((status, head_end..head_end + length))
}

/// The first run's decision in an order's answer, without parsing the JSON.
fn decision(body: &[u8]) -> &[u8] {
    match find(body, b"\"decision\":") {
        None => b"?",
        Some(at) => {
            let rest = &body[at + 11..];
            let end = rest.iter().position(|&b| b == b',' || b == b'}').unwrap_or(rest.len());
            let d = rest[..end].trim_ascii();
            d.strip_prefix(b"\"").and_then(|d| d.strip_suffix(b"\"")).unwrap_or(d)
        }
    }
}

/// A `timerfd` on CLOCK_MONOTONIC (the clock of `Instant` on Linux), owned; the runtime
/// waits on it like on a socket.
struct TimerFd(i32);

impl TimerFd {
    fn new() -> io::Result<TimerFd> {
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TimerFd(fd))
    }

    /// Expire once at `at` (absolute); re-arming also clears a past expiry.
    fn arm(&self, at: &libc::timespec) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: *at,
        };
        let rc = unsafe { libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl std::os::fd::AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}

impl Drop for TimerFd {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's (user, system) CPU seconds so far.
fn cpu_seconds() -> (f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

fn main() {
    let args = parse_args();
    // (text before @ID@, text after it); None: the body has no id to fill in.
    let templates: Vec<(Vec<u8>, Option<Vec<u8>>)> = std::fs::read_to_string(&args.bodies)
        .expect("--bodies file")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| match l.find("@ID@") {
            Some(at) => (l[..at].as_bytes().to_vec(), Some(l[at + 4..].as_bytes().to_vec())),
            None => (l.as_bytes().to_vec(), None),
        })
        .collect();
    assert!(!templates.is_empty(), "no bodies in {}", args.bodies);
    let total = (args.rate * (args.warmup_s + args.duration_s)).round() as u64;
    let heads: Vec<Vec<u8>> = args
        .targets
        .iter()
        .map(|t| {
            format!(
                "POST {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/json\r\nContent-Length: ",
                args.path, t, args.key
            )
            .into_bytes()
        })
        .collect();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = tokio::task::LocalSet::new();
    let out = local.block_on(&rt, async move {
        let pool: Rc<RefCell<VecDeque<Conn>>> = Rc::new(RefCell::new(VecDeque::new()));
        for i in 0..args.connections * args.targets.len() {
            let target = i % args.targets.len();
            let stream = connect(&args.targets[target]).await.expect("connect");
            pool.borrow_mut().push_back(Conn { target, stream, buf: Vec::with_capacity(8192) });
        }
        let targets = Rc::new(args.targets.clone());
        let free = Rc::new(Semaphore::new(pool.borrow().len()));
        let hist = Rc::new(RefCell::new(Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3).unwrap()));
        let stats = Rc::new(RefCell::new(Stats::default()));
        let interval_ns = 1e9 / args.rate;

        // Due times on the runtime's own thread: a timerfd armed at the next one.
        let timer = TimerFd::new().expect("timerfd_create");
        // SAFETY: the TimerFd owns its descriptor until it is dropped, with this AsyncFd.
        let timer = match unsafe { AsyncFd::register_with_interest(timer, Interest::READABLE) } {
            Ok(t) => t,
            Err(_) => panic!("registering the timerfd"),
        };
        let start_ns = monotonic_ns() + START_DELAY_MS * 1_000_000;
        let start = Instant::now() + Duration::from_millis(START_DELAY_MS);
        let warm_end = start + Duration::from_secs_f64(args.warmup_s);
        let due_ns = |i: u64| (i as f64 * interval_ns) as u64;
        let tick_ns = args.tick_us * 1_000;
        // How late each request left against its intended start (the generator's own delay,
        // part of its latency): a wakeup's latency, the tick, a busy machine.
        let mut late_hist = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3).unwrap();

        let counts = args.path == "/v1/events";
        let mut tasks = Vec::with_capacity(total as usize);
        for i in 0..total {
            let offset = due_ns(i);
            let intended = start + Duration::from_nanos(offset);
            if intended > Instant::now() {
                // With a tick, the wakeup for this request is at the tick boundary at or after
                // it, and every request due by then goes at that wakeup (each still timed
                // from its own intended start).
                let at = start_ns + if tick_ns > 0 { offset.div_ceil(tick_ns) * tick_ns } else { offset };
                let at = libc::timespec { tv_sec: (at / 1_000_000_000) as _, tv_nsec: (at % 1_000_000_000) as _ };
                timer.get_ref().arm(&at).expect("timerfd_settime");
                let mut ready = timer.readable().await.expect("timerfd");
                ready.clear_ready(); // the next arm clears the expiry (no read needed)
            }
            if intended >= warm_end {
                let late = intended.elapsed().as_micros() as u64;
                late_hist.saturating_record(late.clamp(1, LATENCY_US_MAX));
            }
            let (head, tail) = &templates[(i as usize) % templates.len()];
            let mut body = head.clone();
            if let Some(tail) = tail {
                body.extend_from_slice(format!("{}-{}", args.tag, i).as_bytes());
                body.extend_from_slice(tail);
            }
            let (pool, free, hist, stats) = (pool.clone(), free.clone(), hist.clone(), stats.clone());
            let (heads, targets) = (heads.clone(), targets.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let permit = free.acquire().await.unwrap(); // waiting here counts (open loop)
                let mut conn = pool.borrow_mut().pop_front().expect("a permit means a connection");
                let mut request = heads[conn.target].clone();
                request.extend_from_slice(body.len().to_string().as_bytes());
                request.extend_from_slice(b"\r\n\r\n");
                request.extend_from_slice(&body);
                let mut outcome = exchange(&mut conn, &request).await;
                if matches!(outcome, Err(Failure::Stale(_))) {
                    stats.borrow_mut().reconnects += 1;
                    outcome = match connect(&targets[conn.target]).await {
                        Ok(stream) => {
                            conn.stream = stream;
                            exchange(&mut conn, &request).await
                        }
                        Err(e) => Err(Failure::Broken(e)),
                    };
                }
                match outcome {
                    Err(Failure::Stale(e) | Failure::Broken(e)) => {
                        *stats.borrow_mut().errors.entry(format!("{:?}", e.kind())).or_default() += 1;
                        match connect(&targets[conn.target]).await {
                            Ok(stream) => {
                                conn.stream = stream;
                                pool.borrow_mut().push_back(conn);
                                drop(permit);
                            }
                            Err(_) => permit.forget(), // no connection: one fewer in the pool
                        }
                    }
                    Ok((status, body)) => {
                        let us = intended.elapsed().as_micros() as u64;
                        if intended >= warm_end {
                            let mut s = stats.borrow_mut();
                            if status != 200 {
                                *s.errors.entry(format!("http {status}")).or_default() += 1;
                            } else {
                                hist.borrow_mut().saturating_record(us.clamp(1, LATENCY_US_MAX));
                                if counts {
                                    let d = decision(&conn.buf[body]);
                                    match s.decisions.get_mut(d) {
                                        Some(n) => *n += 1,
                                        None => {
                                            s.decisions.insert(d.to_vec(), 1);
                                        }
                                    }
                                }
                            }
                        }
                        pool.borrow_mut().push_back(conn);
                        drop(permit);
                    }
                }
            }));
        }
        let send_end = Instant::now();
        for t in tasks {
            let _ = t.await;
        }
        let due_end = start + Duration::from_nanos(due_ns(total));
        let (cpu_user_s, cpu_sys_s) = cpu_seconds();
        let lag_s = send_end.saturating_duration_since(due_end).as_secs_f64();
        let h = hist.borrow();
        let s = stats.borrow();
        let map = |m: &BTreeMap<String, u64>| {
            let items: Vec<String> = m.iter().map(|(k, v)| format!("{:?}: {}", k, v)).collect();
            format!("{{{}}}", items.join(", "))
        };
        let decisions: BTreeMap<String, u64> =
            s.decisions.iter().map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), *v)).collect();
        format!(
            "{{\"sent\": {}, \"count\": {}, \"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \
             \"max_us\": {}, \"min_us\": {}, \"errors\": {}, \"decisions\": {}, \
             \"reconnects\": {}, \"send_lag_s\": {:.3}, \"cpu_user_s\": {:.6}, \"cpu_sys_s\": {:.6}, \
             \"cpu_us_per_request\": {:.1}, \"tick_us\": {}, \"send_late_p50_us\": {}, \
             \"send_late_p99_us\": {}, \"send_late_max_us\": {}}}",
            total,
            h.len(),
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
            h.min(),
            map(&s.errors),
            map(&decisions),
            s.reconnects,
            lag_s,
            cpu_user_s,
            cpu_sys_s,
            (cpu_user_s + cpu_sys_s) * 1e6 / total.max(1) as f64,
            args.tick_us,
            late_hist.value_at_quantile(0.50),
            late_hist.value_at_quantile(0.99),
            late_hist.max()
        )
    });
    println!("{out}");
}
