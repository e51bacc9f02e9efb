//! The reservoir's open-chunk counters, one object shared by the Python `StreamReservoir`
//! (which reads and writes them as its attributes) and the stream's native core (which moves
//! them at every event without a Python attribute call; it made seven `getattr`/`setattr`
//! calls on the reservoir per event before).
//!
//! The core borrows the object only between its own calls into Python, never across one.

use pyo3::prelude::*;

#[pyclass(module = "railflow_metrics_native")]
#[derive(Default)]
pub struct Counters {
    /// The position the next event gets.
    #[pyo3(get, set)]
    pub next_pos: u64,
    /// The open chunk's first position.
    #[pyo3(get, set)]
    pub open_first_pos: u64,
    /// The number of the first retained closed chunk.
    #[pyo3(get, set)]
    pub chunk_base: i64,
    /// The open chunk's JSON size in bytes (with a comma per event).
    #[pyo3(get, set)]
    pub open_bytes: i64,
    /// The last event's time (None before any event).
    #[pyo3(get, set)]
    pub last_ts: Option<i64>,
    /// The open chunk has rows left as None, to be decoded from its JSON when read
    /// (`StreamReservoir.lazy_open`).
    #[pyo3(get, set)]
    pub lazy: bool,
    /// The core holds JSON of such rows that the reservoir's `open_blobs` lacks yet: a reader
    /// of the open chunk asks for it first (`StreamReservoir.hand_off`).
    #[pyo3(get, set)]
    pub json_held: bool,
}

#[pymethods]
impl Counters {
    /// Counters of an empty reservoir whose next event gets position `first_pos`.
    #[new]
    #[pyo3(signature = (first_pos=0))]
    fn new(first_pos: u64) -> Counters {
        Counters { next_pos: first_pos, open_first_pos: first_pos, ..Default::default() }
    }
}
