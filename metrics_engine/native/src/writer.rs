//! The reservoir's writer: one native thread that compresses closed chunks (zstd), appends
//! them to their stream's segment file, fsyncs, and deletes segments every window has passed,
//! all without the GIL, so the ingesting thread never waits for it (nor for a Python thread
//! that would take the GIL back from it at every step).
//!
//! The ingesting thread sends work (`chunk`, `trim`, `barrier`) and collects, with `take_done`,
//! where each chunk landed; reservoir.py applies those places to its chunk list. A record is
//! the header `<4sQIII` (magic `RFC1`, first position, event count, payload bytes, crc32 of
//! the payload), then the zstd frame of the chunk's JSON array.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use rustc_hash::FxHashMap;

const MAGIC: &[u8; 4] = b"RFC1";
const ZSTD_LEVEL: i32 = 1;

/// Where a chunk landed: (chunk number, segment, offset, record length, end position).
type Placed = (i64, u64, u64, u64, u64);

enum Op {
    Chunk { sid: usize, k: i64, first: u64, count: u32, payload: Vec<u8> },
    Trim { sid: usize, floor: u64 },
    Barrier { roll: bool, done: SyncSender<()> },
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

#[derive(Default)]
struct Shared {
    streams: Mutex<Vec<Stream>>,
    done: Mutex<FxHashMap<usize, Vec<Placed>>>,
    error: Mutex<Option<String>>,
    paused: Mutex<bool>,
    resume: Condvar,
}

fn segment_path(dir: &std::path::Path, seg: u64) -> PathBuf {
    dir.join(format!("seg-{seg:010}.rfs"))
}

impl Shared {
    fn chunk(&self, comp: &mut zstd::bulk::Compressor<'_>, fsync: bool, sid: usize, k: i64,
             first: u64, count: u32, payload: &[u8]) -> std::io::Result<()> {
        let compressed = comp.compress(payload)?;
        let mut record = Vec::with_capacity(24 + compressed.len());
        record.extend_from_slice(MAGIC);
        record.extend_from_slice(&first.to_le_bytes());
        record.extend_from_slice(&count.to_le_bytes());
        record.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&compressed).to_le_bytes());
        record.extend_from_slice(&compressed);
        let mut streams = self.streams.lock().unwrap();
        let s = &mut streams[sid];
        if s.file.is_some() && s.size + record.len() as u64 > s.segment_bytes_max {
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
        let f = s.file.as_mut().unwrap();
        f.write_all(&record)?;
        if fsync {
            f.sync_data()?;
        }
        s.size += record.len() as u64;
        let end = first + count as u64;
        s.seg_end.insert(s.seg_id, end);
        let placed = (k, s.seg_id, offset, record.len() as u64, end);
        drop(streams);
        self.done.lock().unwrap().entry(sid).or_default().push(placed);
        Ok(())
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

    fn roll(&self) {
        for s in self.streams.lock().unwrap().iter_mut() {
            s.file = None;
        }
    }

    fn run(&self, rx: Receiver<Op>, fsync: bool) {
        let mut comp = match zstd::bulk::Compressor::new(ZSTD_LEVEL) {
            Ok(c) => c,
            Err(e) => {
                *self.error.lock().unwrap() = Some(e.to_string());
                return;
            }
        };
        while let Ok(op) = rx.recv() {
            {
                let mut p = self.paused.lock().unwrap();
                while *p {
                    p = self.resume.wait(p).unwrap();
                }
            }
            match op {
                Op::Chunk { sid, k, first, count, payload } => {
                    if self.error.lock().unwrap().is_some() {
                        continue;
                    }
                    if let Err(e) = self.chunk(&mut comp, fsync, sid, k, first, count, &payload) {
                        *self.error.lock().unwrap() = Some(e.to_string());
                    }

                }
                Op::Trim { sid, floor } => self.trim(sid, floor),
                Op::Barrier { roll, done } => {
                    if roll {
                        self.roll();
                    }
                    let _ = done.send(());
                }
                Op::Stop => {
                    self.roll();
                    return;
                }
            }
        }
    }
}

/// The writer thread of one engine (every stream's reservoir shares it).
#[pyclass(module = "railflow_metrics_native")]
pub struct NativeWriter {
    tx: Option<SyncSender<Op>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl NativeWriter {
    /// Queue a closed chunk whose JSON array the caller built (see `StreamCore`).
    pub fn submit(&self, py: Python<'_>, sid: usize, k: i64, first: u64, count: u32,
                  payload: Vec<u8>) -> PyResult<()> {
        self.send(py, Op::Chunk { sid, k, first, count, payload })
    }

    fn send(&self, py: Python<'_>, op: Op) -> PyResult<()> {
        let tx = self.tx.as_ref()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the writer stopped"))?;
        let ended = || pyo3::exceptions::PyRuntimeError::new_err("the writer thread ended");
        match tx.try_send(op) {
            Ok(()) => Ok(()),
            // A full queue (the disk far behind) blocks here, without holding the GIL; the
            // GIL is kept otherwise (releasing it may hand it to another thread for a while).
            Err(std::sync::mpsc::TrySendError::Full(op)) => {
                py.allow_threads(|| tx.send(op)).map_err(|_| ended())
            }
            Err(_) => Err(ended()),
        }
    }
}

#[pymethods]
impl NativeWriter {
    #[new]
    #[pyo3(signature = (fsync=true, queue_max=256))]
    fn new(fsync: bool, queue_max: usize) -> PyResult<Self> {
        let (tx, rx) = sync_channel(queue_max);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("reservoir-writer".into())
            .spawn(move || s.run(rx, fsync))
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(NativeWriter { tx: Some(tx), shared, thread: Some(thread) })
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
        self.send(py, Op::Chunk { sid, k, first, count, payload })
    }

    /// Delete the segments of stream `sid` that end at or before `floor` (once every chunk
    /// queued before is written).
    fn trim(&self, py: Python<'_>, sid: usize, floor: u64) -> PyResult<()> {
        self.send(py, Op::Trim { sid, floor })
    }

    /// Wait until everything queued so far is done; `roll` closes the open segments.
    #[pyo3(signature = (roll=false))]
    fn barrier(&self, py: Python<'_>, roll: bool) -> PyResult<()> {
        let (done, wait) = sync_channel(1);
        self.send(py, Op::Barrier { roll, done })?;
        py.allow_threads(move || wait.recv())
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the writer thread ended"))
    }

    /// Where the chunks of stream `sid` written since the last call landed, in order.
    fn take_done(&self, sid: usize) -> Vec<Placed> {
        self.shared.done.lock().unwrap().remove(&sid).unwrap_or_default()
    }

    /// The first error the thread met (it writes nothing after one), or None.
    fn error(&self) -> Option<String> {
        self.shared.error.lock().unwrap().clone()
    }

    /// Hold the thread before its next item (tests: a writer lagging behind ingest).
    fn pause(&self, paused: bool) {
        *self.shared.paused.lock().unwrap() = paused;
        self.shared.resume.notify_all();
    }

    fn stop(&mut self, py: Python<'_>) -> PyResult<()> {
        self.pause(false);
        if let Some(tx) = self.tx.take() {
            let _ = py.allow_threads(|| tx.send(Op::Stop));
        }
        if let Some(t) = self.thread.take() {
            py.allow_threads(|| t.join())
                .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("the writer panicked"))?;
        }
        Ok(())
    }
}

impl Drop for NativeWriter {
    fn drop(&mut self) {
        self.pause(false);
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Op::Stop); // the thread also ends when the queue is dropped
        }
    }
}
