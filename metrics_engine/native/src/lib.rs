//! The native core of `metrics_engine`: window cursors over the reservoir, keyed aggregation
//! states and finalizers, driven by a plan that Python lowers and sends (see plan.rs).
//!
//! Modules, one concern each: `num` (exact integers, correctly rounded division), `value`
//! (lowered scalars, strings, bytes), `json` (events into the reservoir's chunks), `columns` (a batch's typed columns), `outcols` (a batch's values as typed columns), `predicate` (WHERE/RATIO evaluated natively), `aggregations` (the monoids), `keyed` (group keys to
//! ids to states), `slab` (a key space's records, grown without copying), `window` (cursors), `writer` (the reservoir's disk writer thread), `counters` (the reservoir's open-chunk counters, shared with Python), `plan` (one stream's hot path, `StreamCore`).

use pyo3::prelude::*;

mod aggregations;
mod columns;
mod counters;
mod json;
mod keyed;
mod num;
mod outcols;
mod plan;
mod predicate;
mod slab;
mod value;
mod window;
mod writer;

#[pymodule]
fn railflow_metrics_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<plan::StreamCore>()?;
    m.add_class::<writer::NativeWriter>()?;
    m.add_class::<counters::Counters>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Events a cursor feeding no window passes per event (pipeline backfills replay it).
    m.add("IDLE_STEP_MAX", plan::IDLE_STEP_MAX)?;
    Ok(())
}
