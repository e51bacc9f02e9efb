//! The reservoir's writer: one native thread that compresses closed chunks (zstd), appends
//! them to their stream's segment file, fsyncs, and deletes segments every window has passed,
//! all without the GIL, so the ingesting thread never waits for it (nor for a Python thread
//! that would take the GIL back from it at every step).
//!
//! Queuing work wakes no thread: waking a sleeping thread cost the ingesting thread ~12 µs
//! (p50; 24 µs p90) on the 2-core VMs W1 runs on, twice per chunk (its close and the next
//! event's trim), which made the slowest events. While busy, the thread polls the queue every
//! `POLL` (it takes whatever came meanwhile); only once it found the queue empty does it sleep
//! until woken, and then the next item wakes it (the first chunk after a pause). A barrier,
//! a stop and a producer held by a full queue wake it at once. Chunks taken together are made
//! durable together: written, then one fsync per file, then their places reported (a place is
//! reported only once its chunk is durable), so a busy stream fsyncs once per poll, not once
//! per chunk. `stats` counts the thread's work (chunks, fsyncs, bytes, time in each step,
//! wakeups, its own CPU time), for the benchmarks' split of CPU per event by thread.
//!
//! The ingesting thread sends work (`chunk`, `trim`, `barrier`) and collects, with `take_done`,
//! where each chunk landed; reservoir.py applies those places to its chunk list. A record is
//! the header `<4sQIII` (magic, first position, event count, payload bytes, crc32 of the
//! payload), then the zstd frame of the chunk's payload: its JSON array (magic `RFC1`) or
//! its columnar frame (`RFC2`, frame.rs).

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use rustc_hash::FxHashMap;

/// Chunks written between two fsyncs at most (a writer far behind still reports places
/// every this many chunks, 1 MiB of events).
const GROUP_CHUNKS_MAX: usize = 16;
/// How long a busy writer waits before it looks at the queue again (the durability lag it
/// adds to a chunk, at most; a barrier does not wait for it).
const POLL: Duration = Duration::from_millis(4);

/// Where a chunk landed: (chunk number, segment, offset, record length, end position).
type Placed = (i64, u64, u64, u64, u64);

enum Op {
    Chunk { sid: usize, k: i64, first: u64, count: u32, payload: Vec<u8>, magic: [u8; 4] },
    Trim { sid: usize, floor: u64 },
    Barrier { roll: bool, done: SyncSender<()> },
    /// A snapshot's segments: made durable, rolled, then hard-linked (copied where links fail)
    /// into one directory per stream, at this point of the queue (see `NativeWriter.link`).
    Link { dests: Vec<(usize, PathBuf)>, done: SyncSender<Result<(), String>> },
    Stop,
}

struct Stream {
    dir: PathBuf,
    seg_id: u64,
    file: Option<File>,
    size: u64,
    seg_end: BTreeMap<u64, u64>, // segment -> end position of its last chunk
    segment_bytes_max: u64,
}

/// What the thread did (`NativeWriter.stats`). Times are wall nanoseconds of each step but
/// `cpu_ns`, the thread's own CPU time (updated whenever it goes idle).
#[derive(Default, Clone, Copy)]
struct Stats {
    chunks: u64,
    fsyncs: u64,
    raw_bytes: u64,
    written_bytes: u64,
    compress_ns: u64,
    write_ns: u64,
    fsync_ns: u64,
    wakeups: u64,
    trims: u64,
    cpu_ns: u64,
}

/// This thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    // SAFETY: a zeroed timespec is a valid one to write into; the clock id is a constant.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn ns_since(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// Chunks written since the last fsync: the streams whose files need one and the places to
/// report once they had it.
#[derive(Default)]
struct Group {
    dirty: Vec<usize>,
    placed: Vec<(usize, Placed)>,
}

/// The queue between the ingesting thread and the writer thread.
#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    /// The writer sleeps until woken (it found the queue empty): the next item wakes it.
    idle: bool,
    /// A producer waits for room (the queue is full).
    full: bool,
    /// The thread ended (stopped, or failed to start): nothing is taken any more.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer (an item while it is idle, a barrier, a stop, a full queue).
    work: Condvar,
    /// Wakes producers waiting for room.
    room: Condvar,
    streams: Mutex<Vec<Stream>>,
    done: Mutex<FxHashMap<usize, Vec<Placed>>>,
    error: Mutex<Option<String>>,
    paused: Mutex<bool>,
    resume: Condvar,
    stats: Mutex<Stats>,
    tid: AtomicI64,
}

fn segment_path(dir: &std::path::Path, seg: u64) -> PathBuf {
    dir.join(format!("seg-{seg:010}.rfs"))
}

impl Shared {
    /// Compress chunk `k` of stream `sid` and append it to the stream's segment, without
    /// fsync: its place joins `group`, reported once `sync` made it durable.
    #[allow(clippy::too_many_arguments)]
    fn chunk(&self, comp: &mut zstd::bulk::Compressor<'_>, bufs: &mut (Vec<u8>, Vec<u8>),
             fsync: bool, group: &mut Group, sid: usize, k: i64, first: u64, count: u32,
             payload: &[u8], magic: &[u8; 4]) -> std::io::Result<()> {
        let t0 = Instant::now();
        let (compressed, record) = bufs;
        compressed.clear();
        compressed.reserve(zstd::zstd_safe::compress_bound(payload.len()));
        comp.compress_to_buffer(payload, &mut *compressed)?;
        record.clear();
        record.extend_from_slice(magic);
        record.extend_from_slice(&first.to_le_bytes());
        record.extend_from_slice(&count.to_le_bytes());
        record.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&compressed[..]).to_le_bytes());
        record.extend_from_slice(&compressed[..]);
        let t1 = Instant::now();
        let mut streams = self.streams.lock().unwrap();
        let s = &mut streams[sid];
        let mut synced_ns = 0;
        if s.file.is_some() && s.size + record.len() as u64 > s.segment_bytes_max {
            // The segment rolls: what the group wrote into it is made durable first.
            if fsync && group.dirty.contains(&sid) {
                let t = Instant::now();
                s.file.as_ref().unwrap().sync_data()?;
                synced_ns = ns_since(t);
            }
            s.file = None;
        }
        if s.file.is_none() {
            s.seg_id += 1;
            std::fs::create_dir_all(&s.dir)?;
            s.file = Some(OpenOptions::new().create(true).append(true)
                .open(segment_path(&s.dir, s.seg_id))?);
            s.size = 0;
        }
        let offset = s.size;
        s.file.as_mut().unwrap().write_all(&record[..])?;
        s.size += record.len() as u64;
        let end = first + count as u64;
        s.seg_end.insert(s.seg_id, end);
        let placed = (k, s.seg_id, offset, record.len() as u64, end);
        drop(streams);
        if !group.dirty.contains(&sid) {
            group.dirty.push(sid);
        }
        group.placed.push((sid, placed));
        let mut st = self.stats.lock().unwrap();
        st.chunks += 1;
        st.raw_bytes += payload.len() as u64;
        st.written_bytes += record.len() as u64;
        st.compress_ns += (t1 - t0).as_nanos() as u64;
        st.write_ns += ns_since(t1).saturating_sub(synced_ns);
        st.fsync_ns += synced_ns;
        st.fsyncs += (synced_ns > 0) as u64;
        Ok(())
    }

    /// Make the group's chunks durable (one fsync per file written) and report their places.
    fn sync(&self, group: &mut Group, fsync: bool) {
        if group.placed.is_empty() {
            return;
        }
        if fsync {
            let t = Instant::now();
            let failed = {
                let streams = self.streams.lock().unwrap();
                group.dirty.iter().find_map(|&sid| {
                    streams[sid].file.as_ref().and_then(|f| f.sync_data().err())
                })
            };
            if let Some(e) = failed {
                *self.error.lock().unwrap() = Some(e.to_string());
                group.dirty.clear();
                group.placed.clear(); // not durable: never reported
                return;
            }
            let mut st = self.stats.lock().unwrap();
            st.fsyncs += group.dirty.len() as u64;
            st.fsync_ns += ns_since(t);
        }
        group.dirty.clear();
        let mut done = self.done.lock().unwrap();
        for (sid, p) in group.placed.drain(..) {
            done.entry(sid).or_default().push(p);
        }
    }

    fn trim(&self, sid: usize, floor: u64) {
        let mut streams = self.streams.lock().unwrap();
        let s = &mut streams[sid];
        let gone: Vec<u64> = s.seg_end.iter()
            .filter(|(&seg, &end)| end <= floor && !(seg == s.seg_id && s.file.is_some()))
            .map(|(&seg, _)| seg).collect();
        for seg in gone {
            let _ = std::fs::remove_file(segment_path(&s.dir, seg));
            s.seg_end.remove(&seg);
        }
    }

    /// Link every segment file of each stream into its destination (created here): the
    /// segments as they are at this point of the queue, rolled so that none grows after.
    fn link(&self, dests: &[(usize, PathBuf)]) -> std::io::Result<()> {
        let streams = self.streams.lock().unwrap();
        for (sid, dest) in dests {
            std::fs::create_dir_all(dest)?;
            let dir = &streams[*sid].dir;
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let name = entry.file_name();
                let text = name.to_string_lossy();
                if !(text.starts_with("seg-") && text.ends_with(".rfs")) {
                    continue;
                }
                let target = dest.join(&name);
                if std::fs::hard_link(entry.path(), &target).is_err() {
                    std::fs::copy(entry.path(), &target)?;
                }
            }
        }
        Ok(())
    }

    fn roll(&self) {
        for s in self.streams.lock().unwrap().iter_mut() {
            s.file = None;
        }
    }

    fn run(&self, fsync: bool, level: i32) {
        self.work_loop(fsync, level);
        let mut q = self.queue.lock().unwrap();
        q.ended = true;
        q.ops.clear(); // barriers queued after a stop: their waiters hear the thread ended
        drop(q);
        self.room.notify_all();
        self.stats.lock().unwrap().cpu_ns = thread_cpu_ns();
    }

    fn work_loop(&self, fsync: bool, level: i32) {
        // SAFETY: gettid has no preconditions.
        self.tid.store(unsafe { libc::gettid() } as i64, Ordering::Relaxed);
        let mut comp = match zstd::bulk::Compressor::new(level) {
            Ok(c) => c,
            Err(e) => {
                *self.error.lock().unwrap() = Some(e.to_string());
                return;
            }
        };
        // The compressed frame and the record, kept from chunk to chunk (fresh buffers of
        // this size would be fresh pages, faulted in at every chunk).
        let mut bufs = (Vec::new(), Vec::new());
        let mut group = Group::default();
        let mut batch: VecDeque<Op> = VecDeque::new();
        loop {
            {
                let mut q = self.queue.lock().unwrap();
                if q.ops.is_empty() {
                    // Nothing came since the last look: sleep until an item wakes the thread.
                    q.idle = true;
                    self.stats.lock().unwrap().cpu_ns = thread_cpu_ns();
                    while q.ops.is_empty() {
                        q = self.work.wait(q).unwrap();
                    }
                    q.idle = false;
                    self.stats.lock().unwrap().wakeups += 1;
                }
                std::mem::swap(&mut batch, &mut q.ops);
                if q.full {
                    q.full = false;
                    self.room.notify_all();
                }
            }
            for op in batch.drain(..) {
                {
                    let mut p = self.paused.lock().unwrap();
                    while *p {
                        p = self.resume.wait(p).unwrap();
                    }
                }
                match op {
                    Op::Chunk { sid, k, first, count, payload, magic } => {
                        if self.error.lock().unwrap().is_some() {
                            continue;
                        }
                        if let Err(e) = self.chunk(&mut comp, &mut bufs, fsync, &mut group, sid,
                                                   k, first, count, &payload, &magic) {
                            *self.error.lock().unwrap() = Some(e.to_string());
                        }
                        if group.placed.len() >= GROUP_CHUNKS_MAX {
                            self.sync(&mut group, fsync);
                        }
                    }
                    Op::Trim { sid, floor } => {
                        // No fsync first: the segments it deletes are ones every window passed.
                        self.trim(sid, floor);
                        self.stats.lock().unwrap().trims += 1;
                    }
                    Op::Barrier { roll, done } => {
                        self.sync(&mut group, fsync);
                        if roll {
                            self.roll();
                        }
                        let _ = done.send(());
                    }
                    Op::Link { dests, done } => {
                        self.sync(&mut group, fsync);
                        self.roll();
                        let failed = self.error.lock().unwrap().clone();
                        let result = match failed {
                            Some(e) => Err(e),
                            None => self.link(&dests).map_err(|e| e.to_string()),
                        };
                        let _ = done.send(result);
                    }
                    Op::Stop => {
                        self.sync(&mut group, fsync);
                        self.roll();
                        return;
                    }
                }
            }
            self.sync(&mut group, fsync);
            // Busy: look again after `POLL` (producers do not wake the thread meanwhile; a
            // barrier, a stop or a full queue do).
            let q = self.queue.lock().unwrap();
            if q.ops.is_empty() {
                let _ = self.work.wait_timeout(q, POLL).unwrap();
            }
        }
    }
}

/// The writer thread of one engine (every stream's reservoir shares it).
#[pyclass(module = "railflow_metrics_native")]
pub struct NativeWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    queue_max: usize,
    stopped: bool,
}

impl NativeWriter {
    /// Queue a closed chunk whose payload the caller built (see `StreamCore`): a JSON array
    /// (`magic` `RFC1`) or a columnar frame (`RFC2`, frame.rs).
    #[allow(clippy::too_many_arguments)]
    pub fn submit(&self, py: Python<'_>, sid: usize, k: i64, first: u64, count: u32,
                  payload: Vec<u8>, magic: [u8; 4]) -> PyResult<()> {
        self.send(py, Op::Chunk { sid, k, first, count, payload, magic }, false)
    }

    /// Queue `op`; `urgent` (a barrier, a stop) wakes the thread whatever it does. A full
    /// queue (the disk far behind) blocks here, without holding the GIL; the GIL is kept
    /// otherwise (releasing it may hand it to another thread for a while).
    fn send(&self, py: Python<'_>, op: Op, urgent: bool) -> PyResult<()> {
        if self.stopped {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("the writer stopped"));
        }
        let ended = || pyo3::exceptions::PyRuntimeError::new_err("the writer thread ended");
        let mut op = Some(op);
        loop {
            {
                let mut q = self.shared.queue.lock().unwrap();
                if q.ended {
                    return Err(ended());
                }
                if urgent || q.ops.len() < self.queue_max {
                    q.ops.push_back(op.take().expect("queued once"));
                    let wake = urgent || q.idle;
                    if wake {
                        q.idle = false; // one wake is enough
                    }
                    drop(q);
                    if wake {
                        self.shared.work.notify_one();
                    }
                    return Ok(());
                }
            }
            let shared = self.shared.clone();
            let max = self.queue_max;
            py.allow_threads(move || {
                let mut q = shared.queue.lock().unwrap();
                while q.ops.len() >= max && !q.ended {
                    q.full = true;
                    shared.work.notify_one(); // a polling writer takes the queue now
                    q = shared.room.wait(q).unwrap();
                }
            });
        }
    }
}

#[pymethods]
impl NativeWriter {
    /// `level`: zstd's level for the chunks (negative levels are zstd's fast modes; any
    /// level makes the same kind of frame, which every reader decompresses).
    #[new]
    #[pyo3(signature = (fsync=true, queue_max=256, level=1))]
    fn new(fsync: bool, queue_max: usize, level: i32) -> PyResult<Self> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("reservoir-writer".into())
            .spawn(move || s.run(fsync, level))
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(NativeWriter { shared, thread: Some(thread), queue_max: queue_max.max(1),
                          stopped: false })
    }

    /// A stream's reservoir directory; `seg_id` is its last segment on disk and `seg_end` the
    /// end position of every segment there. Returns the stream's id for the other calls.
    fn register(&self, dir: PathBuf, seg_id: u64, seg_end: BTreeMap<u64, u64>,
                segment_bytes_max: u64) -> usize {
        let mut streams = self.shared.streams.lock().unwrap();
        streams.push(Stream { dir, seg_id, file: None, size: 0, seg_end, segment_bytes_max });
        streams.len() - 1
    }

    /// Queue closed chunk `k` of stream `sid`: `payload` is its JSON array (bytes), or the
    /// list of its events' JSON (bytes each), joined here into the array in one copy.
    fn chunk(&self, py: Python<'_>, sid: usize, k: i64, first: u64, count: u32,
             payload: &Bound<'_, PyAny>) -> PyResult<()> {
        let payload = if let Ok(parts) = payload.downcast::<PyList>() {
            let parts = parts.iter().map(|p| p.downcast_into::<PyBytes>())
                .collect::<Result<Vec<_>, _>>()?;
            let size: usize = parts.iter().map(|p| p.as_bytes().len() + 1).sum::<usize>() + 2;
            let mut out = Vec::with_capacity(size);
            out.push(b'[');
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(p.as_bytes());
            }
            out.push(b']');
            out
        } else {
            payload.downcast::<PyBytes>()?.as_bytes().to_vec()
        };
        self.send(py, Op::Chunk { sid, k, first, count, payload, magic: crate::frame::MAGIC_JSON },
                  false)
    }

    /// Delete the segments of stream `sid` that end at or before `floor` (once every chunk
    /// queued before is written).
    fn trim(&self, py: Python<'_>, sid: usize, floor: u64) -> PyResult<()> {
        self.send(py, Op::Trim { sid, floor }, false)
    }

    /// Wait until everything queued so far is done; `roll` closes the open segments.
    #[pyo3(signature = (roll=false))]
    fn barrier(&self, py: Python<'_>, roll: bool) -> PyResult<()> {
        let (done, wait) = sync_channel(1);
        self.send(py, Op::Barrier { roll, done }, true)?;
        py.allow_threads(move || wait.recv())
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the writer thread ended"))
    }

    /// Queue the links of a snapshot's segments: once every item queued before is durable,
    /// the open segments roll and each stream's segment files are hard-linked into its
    /// `dests` directory (created then). Returns at once (it never waits for the queue's
    /// room nor for the thread); `LinkTicket.wait` waits for the links.
    fn link(&self, py: Python<'_>, dests: Vec<(usize, PathBuf)>) -> PyResult<LinkTicket> {
        let (done, wait) = sync_channel(1);
        self.send(py, Op::Link { dests, done }, true)?;
        Ok(LinkTicket { wait: Mutex::new(Some(wait)), result: Mutex::new(None) })
    }

    /// Where the chunks of stream `sid` written since the last call landed, in order.
    fn take_done(&self, sid: usize) -> Vec<Placed> {
        self.shared.done.lock().unwrap().remove(&sid).unwrap_or_default()
    }

    /// The first error the thread met (it writes nothing after one), or None.
    fn error(&self) -> Option<String> {
        self.shared.error.lock().unwrap().clone()
    }

    /// The thread's work so far (see `Stats`), as a dict of counters; `tid` is its Linux
    /// thread id (0 until it started), for per-thread CPU clocks.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let st = *self.shared.stats.lock().unwrap();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("chunks", st.chunks)?;
        d.set_item("fsyncs", st.fsyncs)?;
        d.set_item("raw_bytes", st.raw_bytes)?;
        d.set_item("written_bytes", st.written_bytes)?;
        d.set_item("compress_ns", st.compress_ns)?;
        d.set_item("write_ns", st.write_ns)?;
        d.set_item("fsync_ns", st.fsync_ns)?;
        d.set_item("wakeups", st.wakeups)?;
        d.set_item("trims", st.trims)?;
        d.set_item("cpu_ns", st.cpu_ns)?;
        d.set_item("tid", self.shared.tid.load(Ordering::Relaxed))?;
        Ok(d)
    }

    /// Hold the thread before its next item (tests: a writer lagging behind ingest).
    fn pause(&self, paused: bool) {
        *self.shared.paused.lock().unwrap() = paused;
        self.shared.resume.notify_all();
    }

    fn stop(&mut self, py: Python<'_>) -> PyResult<()> {
        self.pause(false);
        if !self.stopped {
            let _ = self.send(py, Op::Stop, true);
            self.stopped = true;
        }
        if let Some(t) = self.thread.take() {
            py.allow_threads(|| t.join())
                .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the writer panicked"))?;
        }
        Ok(())
    }
}

/// The pending links of one snapshot (`NativeWriter.link`).
#[pyclass(module = "railflow_metrics_native")]
pub struct LinkTicket {
    wait: Mutex<Option<std::sync::mpsc::Receiver<Result<(), String>>>>,
    result: Mutex<Option<Result<(), String>>>,
}

#[pymethods]
impl LinkTicket {
    /// Wait (without the GIL) until the links are made; raises OSError if they failed or the
    /// writer failed before (its chunks are not all on disk), RuntimeError if it ended.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let known = self.result.lock().unwrap().clone();
        let result = match known {
            Some(r) => r,
            None => {
                // The receiver is taken out first: no lock is held while waiting.
                let rx = self.wait.lock().unwrap().take();
                let got = match rx {
                    Some(rx) => py.allow_threads(move || rx.recv())
                        .unwrap_or_else(|_| Err("the writer thread ended".to_string())),
                    None => Err("another thread waits for these links".to_string()),
                };
                *self.result.lock().unwrap() = Some(got.clone());
                got
            }
        };
        result.map_err(|e| pyo3::exceptions::PyOSError::new_err(
            format!("snapshot links failed: {e}")))
    }
}

impl Drop for NativeWriter {
    fn drop(&mut self) {
        self.pause(false);
        if !self.stopped {
            let mut q = self.shared.queue.lock().unwrap();
            if !q.ended {
                q.ops.push_back(Op::Stop);
            }
            drop(q);
            self.shared.work.notify_one();
        }
    }
}
