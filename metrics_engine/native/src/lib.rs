//! The native core of `metrics_engine`: window cursors over the reservoir, keyed aggregation
//! states and finalizers, driven by a plan that Python lowers and sends (see plan.rs).
//!
//! Modules, one concern each: `num` (exact integers, correctly rounded division), `value`
//! (lowered scalars, strings, bytes), `json` (events into the reservoir's chunks), `frame` (a batch's chunk as columns), `columns` (a batch's typed columns), `outcols` (a batch's values as typed columns), `outdict` (`ingest`'s dict filled by entry index), `arrow_ffi` (those columns to pyarrow through the Arrow C data interface), `predicate` (WHERE/RATIO evaluated natively), `aggregations` (the monoids), `keyed` (group keys to
//! ids to states), `lazy` (many sliding windows of a group-by evicting a key's events when it is touched), `slab` (a key space's records, grown without copying), `window` (cursors), `writer` (the reservoir's disk writer thread), `counters` (the reservoir's open-chunk counters, shared with Python), `trace` (where a slow call spent its time), `frozen` (a snapshot's copy of the states, written off the ingesting thread), `plan` (one stream's hot path, `StreamCore`).

use pyo3::prelude::*;

mod aggregations;
mod arrow_ffi;
mod columns;
mod counters;
mod frame;
mod frozen;
mod json;
mod keyed;
mod lazy;
mod num;
mod outcols;
mod outdict;
mod plan;
mod predicate;
mod slab;
mod trace;
mod value;
mod window;
mod writer;

/// `a / b` as the finalizers divide (`num::div`): for tests holding it to Python's correctly
/// rounded `int / int` at every operand size.
#[pyfunction]
fn exact_ratio(a: num_bigint::BigInt, b: num_bigint::BigInt) -> PyResult<f64> {
    if b.sign() != num_bigint::Sign::Plus {
        return Err(pyo3::exceptions::PyValueError::new_err("b must be positive"));
    }
    Ok(num::div(&num::Num::norm(a), &num::Num::norm(b)))
}

/// `a * a / (b * b * b)` as SKEWNESS divides (`num::div_square_by_cube`), for the same tests.
#[pyfunction]
fn square_by_cube_ratio(a: num_bigint::BigInt, b: num_bigint::BigInt) -> PyResult<f64> {
    if b.sign() != num_bigint::Sign::Plus {
        return Err(pyo3::exceptions::PyValueError::new_err("b must be positive"));
    }
    Ok(num::div_square_by_cube(&num::Num::norm(a), &num::Num::norm(b)))
}

#[pymodule]
fn railflow_metrics_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(exact_ratio, m)?)?;
    m.add_function(wrap_pyfunction!(square_by_cube_ratio, m)?)?;
    m.add_function(wrap_pyfunction!(frame::decode_columns, m)?)?;
    m.add_function(wrap_pyfunction!(frame::columns_json, m)?)?;
    m.add_class::<plan::StreamCore>()?;
    m.add_class::<frozen::FrozenStates>()?;
    m.add_class::<arrow_ffi::Exported>()?;
    m.add_class::<writer::NativeWriter>()?;
    m.add_class::<writer::LinkTicket>()?;
    m.add_class::<counters::Counters>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Events a cursor feeding no window passes per event (pipeline backfills replay it).
    m.add("IDLE_STEP_MAX", plan::IDLE_STEP_MAX)?;
    m.add("LAZY_MIN_TABLES", lazy::LAZY_MIN_TABLES)?;
    m.add("LAZY_MIN_ALLOCATING", lazy::LAZY_MIN_ALLOCATING)?;
    m.add("LOG_MAX", lazy::LOG_MAX)?;
    m.add("TRACE_SECTIONS", trace::SECTIONS.to_vec())?;
    Ok(())
}
