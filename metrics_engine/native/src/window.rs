//! Window cursors: an iterator over one stream's reservoir that advances up to a time bound
//! and feeds the windows subscribed to it (as a tail it inserts, as a head it evicts).
//!
//! The reservoir stays the Python `StreamReservoir` (chunks of `(ts, event)`). The core knows
//! the place and length of every chunk it closed itself (`Chunks`), and keeps their rows
//! lowered (plan.rs): a cursor then walks positions without Python, and asks the reservoir
//! for a chunk's list (`chunk(k)`, which may read the disk) only when it needs the events
//! themselves. So a head never waits for the disk in steady state.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

pub const TS_MAX: i64 = 1 << 62;

/// A bound a cursor advances to: `all` (the current event), `prev` (the one before it),
/// `le(d)` (ts <= t - d), `hop(every, align, lag)` (ts < bucket(t) - lag).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spec {
    All,
    Prev,
    Le(i64),
    Hop(i64, i64, i64),
}

impl Spec {
    pub fn parse(kind: &str, a: i64, b: i64, c: i64) -> PyResult<Spec> {
        Ok(match kind {
            "all" => Spec::All,
            "prev" => Spec::Prev,
            "le" => Spec::Le(a),
            "hop" => Spec::Hop(a, b, c),
            _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("cursor {kind}"))),
        })
    }

    /// (largest ts, end position) a cursor of this spec may pass at time `t`.
    pub fn limits(&self, t: i64, next_pos: u64) -> (i64, u64) {
        match *self {
            Spec::All => (TS_MAX, next_pos),
            Spec::Prev => (TS_MAX, next_pos.saturating_sub(1)),
            Spec::Le(d) => (t - d, next_pos),
            Spec::Hop(every, align, lag) => ((t - align).div_euclid(every) * every + align - lag - 1, next_pos),
        }
    }
}

/// The chunks the core closed itself (first position, event count, by chunk number), and the
/// open chunk: enough to locate a position and cross chunk boundaries without the reservoir.
#[derive(Default)]
pub struct Chunks {
    closed: std::collections::VecDeque<(i64, u64, usize)>,
    pub open: Option<(i64, u64)>, // (chunk number, first position) of the open chunk
    pub next_pos: u64,
}

impl Chunks {
    pub fn closed(&mut self, k: i64, first: u64, len: usize) {
        if self.closed.back().is_some_and(|&(b, _, _)| b >= k) {
            self.closed.clear(); // numbering restarted (cannot happen; stay safe)
        }
        self.closed.push_back((k, first, len));
    }

    /// Forget chunks numbered below `base` (trimmed).
    pub fn trim(&mut self, base: i64) {
        while self.closed.front().is_some_and(|&(k, _, _)| k < base) {
            self.closed.pop_front();
        }
    }

    /// The number of events of chunk `k`, when the core knows it.
    pub fn len(&self, k: i64) -> Option<usize> {
        if let Some((ok, first)) = self.open {
            if k == ok {
                return Some((self.next_pos - first) as usize);
            }
        }
        let (k0, _, _) = *self.closed.front()?;
        let i = usize::try_from(k - k0).ok()?;
        self.closed.get(i).filter(|c| c.0 == k).map(|c| c.2)
    }

    /// (chunk number, index) of position `pos`, when the core knows it.
    pub fn locate(&self, pos: u64) -> Option<(i64, usize)> {
        if let Some((ok, first)) = self.open {
            if pos >= first {
                return Some((ok, (pos - first) as usize));
            }
        }
        let i = self.closed.partition_point(|c| c.1 <= pos).checked_sub(1)?;
        let (k, first, len) = self.closed[i];
        ((pos - first) < len as u64).then_some((k, (pos - first) as usize))
    }
}

pub struct Cursor {
    pub id: i64,
    pub spec: Spec,
    pub pos: u64,
    pub k: i64,
    pub idx: usize,
    pub events: Option<Py<PyList>>,
    pub stale: bool, // moved without reading (the fast path): seek before reading
    pub inserts: Vec<usize>,
    pub evicts: Vec<usize>,
    /// A head all of whose windows' tables are evicted lazily (lazy.rs): it passes a raw
    /// key's events without touching their key.
    pub lazy: bool,
    /// (position, ts) of the row it stopped before, last time it moved: while `pos` is that
    /// position, whether it has anything to pass is one comparison (a row's ts never changes).
    pub ahead: (u64, i64),
}

impl Cursor {
    pub fn new(id: i64, spec: Spec, pos: u64) -> Cursor {
        Cursor { id, spec, pos, k: 0, idx: 0, events: None, stale: true, inserts: vec![], evicts: vec![],
                 lazy: false, ahead: (u64::MAX, 0) }
    }

    /// Point at `pos` in the reservoir `res`.
    pub fn seek(&mut self, res: &Bound<'_, PyAny>, pos: u64) -> PyResult<()> {
        let (k, idx): (i64, usize) = res.call_method1("locate", (pos,))?.extract()?;
        let events = res.call_method1("chunk", (k,))?.downcast_into::<PyList>()?;
        self.pos = pos;
        self.k = k;
        self.idx = idx;
        self.events = Some(events.unbind());
        self.stale = false;
        Ok(())
    }

    /// Make (`k`, `idx`) the place of the next event under this cursor (crossing into the
    /// next chunk when this one is used up), natively where `chunks` knows the chunks; the
    /// chunk's list (`events`) is then fetched only by `events` when a caller needs it.
    /// `lowered(k)`: whether the core holds chunk `k`'s rows (else it is prefetched).
    pub fn position(&mut self, py: Python<'_>, res: &Bound<'_, PyAny>, chunks: &Chunks,
                    lowered: impl Fn(i64) -> bool) -> PyResult<()> {
        if self.stale {
            match chunks.locate(self.pos) {
                Some((k, idx)) => {
                    (self.k, self.idx, self.events, self.stale) = (k, idx, None, false);
                }
                None => self.seek(res, self.pos)?,
            }
        }
        loop {
            let len = match &self.events {
                Some(ev) => ev.bind(py).len(),
                None => match chunks.len(self.k) {
                    Some(n) => n,
                    None => {
                        self.events(py, res)?;
                        continue;
                    }
                },
            };
            if self.idx < len {
                return Ok(());
            }
            self.k += 1;
            self.idx = 0;
            self.events = None;
            if !lowered(self.k + 1) {
                res.call_method1("prefetch", (self.k + 1,))?;
            }
        }
    }

    /// Row `idx` of the cursor's chunk as (ts, event). A row the batched path appended is
    /// None in the list until the reservoir decodes the chunk (`chunk(k)` does, in place).
    pub fn item<'py>(&mut self, py: Python<'py>, res: &Bound<'py, PyAny>, idx: usize)
                     -> PyResult<(i64, Bound<'py, PyAny>)> {
        let it = self.events(py, res)?.get_item(idx)?;
        if !it.is_none() {
            return split(&it);
        }
        let ev = res.call_method1("chunk", (self.k,))?.downcast_into::<PyList>()?;
        let it = ev.get_item(idx)?;
        self.events = Some(ev.unbind());
        split(&it)
    }

    /// The list of the cursor's current chunk, fetched from the reservoir if not held yet.
    pub fn events<'py>(&mut self, py: Python<'py>, res: &Bound<'py, PyAny>)
                       -> PyResult<Bound<'py, PyList>> {
        if self.events.is_none() {
            let ev = res.call_method1("chunk", (self.k,))?.downcast_into::<PyList>()?;
            self.events = Some(ev.unbind());
        }
        Ok(self.events.as_ref().unwrap().bind(py).clone())
    }

    /// The next (ts, event) under this cursor, moving to the next chunk when needed; the
    /// caller moves `pos`/`idx` on once it has used the event.
    pub fn peek<'py>(&mut self, py: Python<'py>, res: &Bound<'py, PyAny>)
                     -> PyResult<(i64, Bound<'py, PyAny>)> {
        if self.stale || self.events.is_none() {
            self.seek(res, self.pos)?;
        }
        loop {
            let events = self.events.as_ref().unwrap().bind(py);
            if self.idx < events.len() {
                let idx = self.idx;
                return self.item(py, res, idx);
            }
            self.k += 1;
            let next = res.call_method1("chunk", (self.k,))?.downcast_into::<PyList>()?;
            self.events = Some(next.unbind());
            self.idx = 0;
            res.call_method1("prefetch", (self.k + 1,))?;
        }
    }
}

/// `(ts, event)` from a tuple (events in memory) or a list (events read back from disk).
pub fn split<'py>(item: &Bound<'py, PyAny>) -> PyResult<(i64, Bound<'py, PyAny>)> {
    if let Ok(t) = item.downcast::<PyTuple>() {
        return Ok((t.get_item(0)?.extract()?, t.get_item(1)?));
    }
    let l = item.downcast::<PyList>()?;
    Ok((l.get_item(0)?.extract()?, l.get_item(1)?))
}
