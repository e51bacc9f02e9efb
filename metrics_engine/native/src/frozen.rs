//! A snapshot's frozen view of one stream core's keyed states (`StreamCore.freeze`).
//!
//! `StreamCore.dump()` encodes every held key and its states, ordered by canonical key bytes:
//! its cost grows with the keys a node holds, and a checkpoint took it on the apply thread.
//! `freeze()` takes instead a copy of what `dump` reads (each table's slots, views, held keys'
//! states, the key spaces' keys, the interner's texts in shared blocks): no encoding, no
//! sort, no Python object. `FrozenStates.dump()` writes the same bytes from that copy later,
//! on any thread, with the GIL released, while the core ingests on: the copy shares nothing
//! the core changes.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::keyed::{GroupTable, KeySpace};
use crate::value::{Interner, Out};

/// What `dump` reads, copied: per group node in gid order (gid, table, view), the tables
/// (detached from their key spaces' slabs) and the spaces (keys only).
pub struct Frozen {
    pub groups: Vec<(String, usize, usize)>,
    pub tables: Vec<GroupTable>,
    pub spaces: Vec<KeySpace>,
    pub strings: Interner,
}

impl Frozen {
    /// `StreamCore.dump()`'s bytes at the freeze (the same code writes them: keyed.rs
    /// `GroupTable::write`).
    fn render(&self) -> Vec<u8> {
        let mut out = Out::default();
        out.u32(self.groups.len() as u32);
        for (gid, ti, view) in &self.groups {
            out.bytes(gid.as_bytes());
            let t = &self.tables[*ti];
            t.write(&mut out, &self.strings, &self.spaces[t.space], *view, false);
        }
        out.buf
    }
}

/// A stream core's states frozen for a snapshot; `dump()` once gives their bytes.
#[pyclass(module = "railflow_metrics_native")]
pub struct FrozenStates {
    inner: Option<Frozen>,
}

impl FrozenStates {
    pub fn new(frozen: Frozen) -> FrozenStates {
        FrozenStates { inner: Some(frozen) }
    }
}

#[pymethods]
impl FrozenStates {
    /// The bytes `StreamCore.dump()` gave when this was frozen. Encoded, and the copy freed,
    /// without the GIL; once only (the copy is gone after).
    fn dump<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let frozen = self.inner.take()
            .ok_or_else(|| PyRuntimeError::new_err("frozen states already dumped"))?;
        let buf = py.allow_threads(move || frozen.render());
        Ok(PyBytes::new(py, &buf))
    }
}
