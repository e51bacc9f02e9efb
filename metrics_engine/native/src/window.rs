//! Window cursors: an iterator over one stream's reservoir that advances up to a time bound
//! and feeds the windows subscribed to it (as a tail it inserts, as a head it evicts).
//!
//! The reservoir stays the Python `StreamReservoir` (chunks of `(ts, event)`); a cursor holds
//! the list of its current chunk and calls back into Python only when it crosses a chunk
//! boundary (`chunk(k)`, then `prefetch(k + 1)`), so steady-state reads are native.

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
}

impl Cursor {
    pub fn new(id: i64, spec: Spec, pos: u64) -> Cursor {
        Cursor { id, spec, pos, k: 0, idx: 0, events: None, stale: true, inserts: vec![], evicts: vec![] }
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

    /// Make `events[idx]` the next event under this cursor (crossing into the next chunk
    /// when this one is used up).
    pub fn position(&mut self, py: Python<'_>, res: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.stale || self.events.is_none() {
            self.seek(res, self.pos)?;
        }
        while self.idx >= self.events.as_ref().unwrap().bind(py).len() {
            self.k += 1;
            let next = res.call_method1("chunk", (self.k,))?.downcast_into::<PyList>()?;
            self.events = Some(next.unbind());
            self.idx = 0;
            res.call_method1("prefetch", (self.k + 1,))?;
        }
        Ok(())
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
                let item = events.get_item(self.idx)?;
                return split(&item);
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
