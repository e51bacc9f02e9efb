//! A chunk of batched rows as columns: the reservoir's record for a chunk whose rows all came
//! from one batch of typed columns (`ingest_arrays`). The batch's buffers are sliced into it
//! as they are, so no row is written as JSON, and the writer thread compresses about a third
//! of the bytes it would as JSON. Read back it gives the very events the JSON would.
//!
//! Layout (little-endian): `RFcf`, rows (u32), columns (u32), the times as integers (below),
//! then per column its name (u32 length, UTF-8), its kind (`i` i64, `f` f64, `b` a byte, `s`
//! string, `n` all null), a validity flag (0, or 1 and a byte per row, 0 for null), and its
//! values: integers as a width (1, 2, 4 or 8), a base (i64, the smallest value) and each
//! value minus the base in that many bytes (a null's as 0); 8 bytes per float; a byte per
//! boolean (non-zero: true); each string's length in bytes (as integers) and the strings'
//! UTF-8, one after another. A
//! non-finite float reads back as null, as JSON keeps it. Narrow integers are what makes the
//! frame cheap to compress: zstd's time goes with the bytes it is given, and ids, amounts
//! and times within a chunk span a few bytes of their eight.
//!
//! On disk the frame is the zstd-compressed payload of a record with magic `RFC2` (a JSON
//! array's record has `RFC1`; reservoir.py reads both). `rows_json` writes a frame's rows as
//! the JSON a batch writes for them (a reader needs the open chunk mid-batch).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString};

use crate::json;

pub const TAG: &[u8; 4] = b"RFcf";
/// Record magics: a chunk as a JSON array, or as a frame.
pub const MAGIC_JSON: [u8; 4] = *b"RFC1";
pub const MAGIC_COLUMNS: [u8; 4] = *b"RFC2";

/// The frame's header and times, before its columns.
pub fn begin(out: &mut Vec<u8>, ts: &[i64], columns: usize) {
    out.extend_from_slice(TAG);
    out.extend_from_slice(&(ts.len() as u32).to_le_bytes());
    out.extend_from_slice(&(columns as u32).to_le_bytes());
    ints(out, ts, None);
}

/// Integers as their width, base and offsets from the base (see the layout); `valid`: a
/// byte per value, 0 for a null (written as 0, and not counted in the span).
pub fn ints(out: &mut Vec<u8>, v: &[i64], valid: Option<&[u8]>) {
    let ok = |i: usize| valid.is_none_or(|m| m[i] != 0);
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for (i, &x) in v.iter().enumerate() {
        if ok(i) {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    if lo > hi {
        (lo, hi) = (0, 0);
    }
    let span = hi.wrapping_sub(lo) as u64;
    let width: usize = match span {
        0..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    };
    out.push(width as u8);
    out.extend_from_slice(&lo.to_le_bytes());
    match width {
        1 => narrowed::<1>(out, v, valid, lo),
        2 => narrowed::<2>(out, v, valid, lo),
        4 => narrowed::<4>(out, v, valid, lo),
        _ => narrowed::<8>(out, v, valid, lo),
    }
}

/// `ints`' offsets from `lo`, `W` bytes each: the low `W` bytes of each offset's
/// little-endian form. The output is sized once and filled in fixed-size pieces (a
/// `extend_from_slice` per value checked the capacity each time, and did not vectorize);
/// the loop without validity has no per-value branch.
fn narrowed<const W: usize>(out: &mut Vec<u8>, v: &[i64], valid: Option<&[u8]>, lo: i64) {
    debug_assert!(valid.is_none_or(|m| m.len() == v.len()), "a validity byte per value");
    let start = out.len();
    out.resize(start + W * v.len(), 0);
    let dst = out[start..].chunks_exact_mut(W);
    let put = |o: &mut [u8], d: u64| o.copy_from_slice(&d.to_le_bytes()[..W]);
    match valid {
        None => dst.zip(v).for_each(|(o, &x)| put(o, x.wrapping_sub(lo) as u64)),
        Some(m) => dst.zip(v).zip(m).for_each(|((o, &x), &ok)| {
            put(o, if ok != 0 { x.wrapping_sub(lo) as u64 } else { 0 })
        }),
    }
}

/// Integers written by `ints`, read back.
struct Ints<'a> {
    width: usize,
    base: i64,
    data: &'a [u8],
}

impl Ints<'_> {
    fn get(&self, i: usize) -> i64 {
        let mut b = [0u8; 8];
        b[..self.width].copy_from_slice(&self.data[i * self.width..(i + 1) * self.width]);
        self.base.wrapping_add(u64::from_le_bytes(b) as i64)
    }
}

/// A column's name, before its `Column::frame` (columns.rs).
pub fn name(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
}

pub struct Col<'a> {
    pub name: &'a str,
    kind: u8,
    valid: Option<&'a [u8]>,
    values: &'a [u8],
    /// A string column's row starts in `values` (rows + 1).
    starts: Vec<usize>,
    ints: Option<Ints<'a>>,
}

/// One value of a frame.
pub enum Cell<'a> {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'a str),
}

pub struct Frame<'a> {
    pub rows: usize,
    ts: Ints<'a>,
    pub cols: Vec<Col<'a>>,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())
            .ok_or_else(|| "a columnar chunk is truncated".to_string())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<usize, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize)
    }

    fn ints(&mut self, rows: usize) -> Result<Ints<'a>, String> {
        let width = self.take(1)?[0] as usize;
        if ![1, 2, 4, 8].contains(&width) {
            return Err(format!("a columnar chunk has integers {width} bytes wide"));
        }
        let base = i64::from_le_bytes(self.take(8)?.try_into().unwrap());
        let data = self.take(width.checked_mul(rows).ok_or("a columnar chunk is corrupt")?)?;
        Ok(Ints { width, base, data })
    }
}

fn word(b: &[u8], i: usize) -> [u8; 8] {
    b[8 * i..8 * i + 8].try_into().unwrap()
}

impl<'a> Frame<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Frame<'a>, String> {
        let mut r = Reader { b, at: 0 };
        if r.take(4)? != TAG {
            return Err("not a columnar chunk".into());
        }
        let rows = r.u32()?;
        let ncols = r.u32()?;
        let ts = r.ints(rows)?;
        let mut cols = Vec::with_capacity(ncols.min(4096));
        for _ in 0..ncols {
            let len = r.u32()?;
            let name = std::str::from_utf8(r.take(len)?).map_err(|_| "a column name is not UTF-8")?;
            let head = r.take(2)?;
            let (kind, has_valid) = (head[0], head[1]);
            let valid = if has_valid != 0 { Some(r.take(rows)?) } else { None };
            let (mut ints, mut starts) = (None, vec![]);
            let values: &[u8] = match kind {
                b'i' => {
                    ints = Some(r.ints(rows)?);
                    &[]
                }
                b'f' => r.take(rows.checked_mul(8).ok_or("a columnar chunk is corrupt")?)?,
                b'b' => r.take(rows)?,
                b's' => {
                    let lens = r.ints(rows)?;
                    starts.reserve(rows + 1);
                    starts.push(0usize);
                    for i in 0..rows {
                        let len = usize::try_from(lens.get(i)).map_err(|_| "a columnar chunk is corrupt")?;
                        let end = starts[i].checked_add(len).ok_or("a columnar chunk is corrupt")?;
                        starts.push(end);
                    }
                    r.take(starts[rows])?
                }
                b'n' => &[],
                _ => return Err(format!("a columnar chunk has a column of kind {kind}")),
            };
            cols.push(Col { name, kind, valid, values, starts, ints });
        }
        if r.at != b.len() {
            return Err("a columnar chunk has trailing bytes".into());
        }
        Ok(Frame { rows, ts, cols })
    }

    pub fn ts(&self, i: usize) -> i64 {
        self.ts.get(i)
    }
}

impl<'a> Col<'a> {
    pub fn cell(&self, i: usize) -> Result<Cell<'a>, String> {
        if self.kind == b'n' || self.valid.is_some_and(|v| v[i] == 0) {
            return Ok(Cell::Null);
        }
        Ok(match self.kind {
            b'i' => Cell::Int(self.ints.as_ref().expect("an integer column").get(i)),
            b'f' => {
                let x = f64::from_le_bytes(word(self.values, i));
                if x.is_finite() { Cell::Float(x) } else { Cell::Null }
            }
            b'b' => Cell::Bool(self.values[i] != 0),
            _ => {
                let (a, b) = (self.starts[i], self.starts[i + 1]);
                let s = self.values.get(a..b).ok_or("a columnar chunk's string is out of bounds")?;
                Cell::Str(std::str::from_utf8(s).map_err(|_| "a columnar chunk's string is not UTF-8")?)
            }
        })
    }
}

/// Append the JSON of the first `rows` rows of `frame` to `out`, each `[ts,{...}]` as a batch
/// writes it, comma-separated (and after a comma if `out` holds more than its `[`).
pub fn rows_json(frame: &[u8], rows: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let f = Frame::parse(frame)?;
    if rows > f.rows {
        return Err(format!("a columnar chunk of {} rows has no row {rows}", f.rows));
    }
    let keys: Vec<Vec<u8>> = f.cols.iter().map(|c| {
        let mut k = vec![];
        json::string(&mut k, c.name);
        k.push(b':');
        k
    }).collect();
    for i in 0..rows {
        if out.len() > 1 {
            out.push(b',');
        }
        out.push(b'[');
        json::int(out, f.ts(i));
        out.extend_from_slice(b",{");
        for (c, col) in f.cols.iter().enumerate() {
            if c > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&keys[c]);
            match col.cell(i)? {
                Cell::Null => out.extend_from_slice(b"null"),
                Cell::Int(x) => json::int(out, x),
                Cell::Float(x) => {
                    json::float(out, x);
                }
                Cell::Bool(x) => out.extend_from_slice(if x { b"true" } else { b"false" }),
                Cell::Str(s) => json::string(out, s),
            }
        }
        out.extend_from_slice(b"}]");
    }
    Ok(())
}

/// A columnar chunk's rows as `[[ts, event], ...]`, as `orjson.loads` gives a JSON chunk's.
#[pyfunction]
pub fn decode_columns<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let bad = pyo3::exceptions::PyValueError::new_err;
    let f = Frame::parse(frame).map_err(bad)?;
    let keys: Vec<Bound<'py, PyString>> = f.cols.iter().map(|c| PyString::new(py, c.name)).collect();
    let mut rows = Vec::with_capacity(f.rows);
    for i in 0..f.rows {
        let ev = PyDict::new(py);
        for (c, col) in f.cols.iter().enumerate() {
            let v: Bound<'py, PyAny> = match col.cell(i).map_err(bad)? {
                Cell::Null => py.None().into_bound(py),
                Cell::Int(x) => x.into_pyobject(py)?.into_any(),
                Cell::Float(x) => PyFloat::new(py, x).into_any(),
                Cell::Bool(x) => PyBool::new(py, x).to_owned().into_any(),
                Cell::Str(s) => PyString::new(py, s).into_any(),
            };
            ev.set_item(&keys[c], v)?;
        }
        let ts = f.ts(i).into_pyobject(py)?.into_any();
        rows.push(PyList::new(py, [ts, ev.into_any()])?);
    }
    PyList::new(py, rows)
}

/// A columnar chunk as the JSON array a batch writes for its rows (tests hold the two
/// records of one chunk to each other).
#[pyfunction]
pub fn columns_json<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let rows = Frame::parse(frame).map_err(pyo3::exceptions::PyValueError::new_err)?.rows;
    let mut out = vec![b'['];
    rows_json(frame, rows, &mut out).map_err(pyo3::exceptions::PyValueError::new_err)?;
    out.push(b']');
    Ok(PyBytes::new(py, &out))
}
