//! Columns of a batch as `ingest_arrays` receives them from plan.py: typed buffers (64-bit
//! integers, floats, booleans, UTF-8 strings as Arrow offsets + data, all-null) read without
//! a Python object per row, or a list of Python values for any other type. Each column
//! lowers a row to a `Val` and writes the row's JSON exactly as `json::write` writes the
//! Python value `to_pylist` would give, so a batch and the same events one by one store and
//! count the same.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::json;
use crate::predicate::PVal;
use crate::value::{lower, Interner, LowerError, Val};

/// A column's values; the buffers are the `bytes` objects plan.py made (read in place).
pub enum Data<'py> {
    Int(Bound<'py, PyBytes>),
    Float(Bound<'py, PyBytes>),
    Bool(Bound<'py, PyBytes>),
    Str { offsets: Bound<'py, PyBytes>, data: Bound<'py, PyBytes> },
    Null,
    Obj(Bound<'py, PyList>),
}

pub struct Column<'py> {
    pub data: Data<'py>,
    valid: Option<Bound<'py, PyBytes>>, // one byte per row, 0 for null
    len: usize,
}

fn bytes<'py>(t: &Bound<'py, PyTuple>, i: usize) -> PyResult<Bound<'py, PyBytes>> {
    Ok(t.get_item(i)?.downcast_into::<PyBytes>()?)
}

fn word(b: &[u8], i: usize) -> [u8; 8] {
    b[8 * i..8 * i + 8].try_into().unwrap()
}

/// Why a row's value was refused: a lowering error, or a JSON one.
pub enum Refused {
    Lower(LowerError),
    Json(String),
}

impl<'py> Column<'py> {
    /// `(kind, valid, ...)`: `("i"|"f"|"b", valid, data)`, `("s", valid, offsets, data)`,
    /// `("n", None)` or `("o", None, list)`; `valid` is None or one byte per row.
    pub fn from_py(t: &Bound<'py, PyTuple>, n: usize) -> PyResult<Column<'py>> {
        let kind: String = t.get_item(0)?.extract()?;
        let valid = match t.get_item(1)? {
            v if v.is_none() => None,
            v => Some(v.downcast_into::<PyBytes>()?),
        };
        let data = match kind.as_str() {
            "i" => Data::Int(bytes(t, 2)?),
            "f" => Data::Float(bytes(t, 2)?),
            "b" => Data::Bool(bytes(t, 2)?),
            "s" => Data::Str { offsets: bytes(t, 2)?, data: bytes(t, 3)? },
            "n" => Data::Null,
            "o" => Data::Obj(t.get_item(2)?.downcast_into::<PyList>()?),
            _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("column kind {kind}"))),
        };
        let ok = match &data {
            Data::Int(b) | Data::Float(b) => b.as_bytes().len() == 8 * n,
            Data::Bool(b) => b.as_bytes().len() == n,
            Data::Str { offsets, data } => {
                let (offsets, data) = (offsets.as_bytes(), data.as_bytes());
                offsets.len() == 8 * (n + 1)
                    && (0..=n).all(|i| {
                        let o = i64::from_le_bytes(word(offsets, i));
                        o >= 0 && o as usize <= data.len()
                    })
            }
            Data::Null => true,
            Data::Obj(l) => l.len() == n,
        };
        if !ok || valid.as_ref().is_some_and(|v| v.as_bytes().len() != n) {
            return Err(pyo3::exceptions::PyValueError::new_err("columns differ in length"));
        }
        Ok(Column { data, valid, len: n })
    }

    fn null(&self, i: usize) -> bool {
        matches!(self.data, Data::Null) || self.valid.as_ref().is_some_and(|v| v.as_bytes()[i] == 0)
    }

    fn str(&self, i: usize) -> Result<&str, Refused> {
        let Data::Str { offsets, data } = &self.data else { unreachable!() };
        let (offsets, data) = (offsets.as_bytes(), data.as_bytes());
        let a = i64::from_le_bytes(word(offsets, i)) as usize;
        let b = i64::from_le_bytes(word(offsets, i + 1)) as usize;
        if a > b {
            return Err(Refused::Json("holds a string that is not UTF-8".into()));
        }
        std::str::from_utf8(&data[a..b]).map_err(|_| Refused::Json("holds a string that is not UTF-8".into()))
    }

    /// Row `i` lowered (strings interned).
    pub fn lower(&self, py: Python<'_>, i: usize, strings: &mut Interner) -> Result<Val, Refused> {
        debug_assert!(i < self.len);
        if self.null(i) {
            return Ok(Val::Null);
        }
        Ok(match &self.data {
            Data::Int(b) => Val::Int(i64::from_le_bytes(word(b.as_bytes(), i)) as i128),
            Data::Float(b) => {
                let x = f64::from_le_bytes(word(b.as_bytes(), i));
                if x.is_finite() { Val::Float(x) } else { Val::Null }
            }
            Data::Bool(b) => Val::Bool(b.as_bytes()[i] != 0),
            Data::Str { .. } => Val::Str(strings.intern_str(py, self.str(i)?)),
            Data::Null => Val::Null,
            Data::Obj(l) => {
                let v = l.get_item(i).map_err(|e| Refused::Json(e.to_string()))?;
                lower(&v, strings).map_err(Refused::Lower)?
            }
        })
    }

    /// Row `i` as a predicate sees it: a list or dict is `Other` (its truthiness), not an
    /// error (predicates.py compares it, false); an integer beyond 64 bits too (the row's
    /// JSON refuses it anyway).
    pub fn pred_value(&self, py: Python<'_>, i: usize, strings: &mut Interner) -> PVal {
        if let Data::Obj(l) = &self.data {
            if !self.null(i) {
                let Ok(v) = l.get_item(i) else { return PVal::Other(true) };
                return match lower(&v, strings) {
                    Ok(x) => PVal::Val(x),
                    Err(_) => PVal::Other(v.is_truthy().unwrap_or(true)),
                };
            }
        }
        match self.lower(py, i, strings) {
            Ok(v) => PVal::Val(v),
            Err(_) => PVal::Other(true),
        }
    }

    /// The column's kind in a columnar chunk frame (frame.rs), or None for a column of
    /// Python values (only JSON stores those).
    pub fn frame_kind(&self) -> Option<u8> {
        Some(match &self.data {
            Data::Int(_) => b'i',
            Data::Float(_) => b'f',
            Data::Bool(_) => b'b',
            Data::Str { .. } => b's',
            Data::Null => b'n',
            Data::Obj(_) => return None,
        })
    }

    /// Whether a frame can hold the column's rows: a string column's offsets never go back
    /// and its data fits 32-bit offsets.
    pub fn framable(&self) -> bool {
        match &self.data {
            Data::Obj(_) => false,
            Data::Str { offsets, data } => {
                let o = offsets.as_bytes();
                data.as_bytes().len() < u32::MAX as usize
                    && (0..self.len).all(|i| i64::from_le_bytes(word(o, i)) <= i64::from_le_bytes(word(o, i + 1)))
            }
            _ => true,
        }
    }

    /// The first non-null row whose string is not UTF-8 (what `json` refuses), if any. Most
    /// columns are checked whole: valid data with every offset on a character boundary.
    pub fn first_bad_string(&self) -> Option<usize> {
        let Data::Str { offsets, data } = &self.data else { return None };
        let (o, d) = (offsets.as_bytes(), data.as_bytes());
        let off = |i: usize| i64::from_le_bytes(word(o, i)) as usize;
        let whole = off(0) <= off(self.len)
            && std::str::from_utf8(&d[off(0)..off(self.len)]).is_ok()
            && (0..=self.len).all(|i| d.get(off(i)).is_none_or(|&c| (c as i8) >= -0x40));
        if whole {
            return None;
        }
        (0..self.len).find(|&i| !self.null(i) && self.str(i).is_err())
    }

    /// Add each row's JSON length (what `json` writes) to `lens`.
    pub fn add_json_lens(&self, lens: &mut [usize]) {
        let valid = self.valid.as_ref().map(|v| v.as_bytes());
        let null = |i: usize| valid.is_some_and(|v| v[i] == 0);
        match &self.data {
            Data::Int(b) => {
                // One slice of the rows, 8 bytes at a time (no bounds check per row), and a
                // loop with no validity test when the column has no nulls.
                let xs = b.as_bytes()[..8 * lens.len()].chunks_exact(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8 bytes")));
                match valid {
                    None => lens.iter_mut().zip(xs).for_each(|(l, x)| *l += json::int_len(x)),
                    Some(v) => lens.iter_mut().zip(xs).zip(v).for_each(|((l, x), &ok)| {
                        *l += if ok == 0 { 4 } else { json::int_len(x) }
                    }),
                }
            }
            Data::Float(b) => {
                let b = b.as_bytes();
                for (i, l) in lens.iter_mut().enumerate() {
                    *l += if null(i) { 4 } else { json::float_len(f64::from_le_bytes(word(b, i))) };
                }
            }
            Data::Bool(b) => {
                let b = b.as_bytes();
                for (i, l) in lens.iter_mut().enumerate() {
                    *l += if null(i) || b[i] != 0 { 4 } else { 5 }; // null, true: 4; false: 5
                }
            }
            Data::Str { offsets, data } => {
                let (o, d) = (offsets.as_bytes(), data.as_bytes());
                let off = |i: usize| i64::from_le_bytes(word(o, i)) as usize;
                let plain = !json::escapes_any(&d[off(0)..off(self.len)]);
                // Each row's end offset from one slice; its start is the row before's end.
                let ends = o[8..8 * (lens.len() + 1)].chunks_exact(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8 bytes")) as usize);
                let mut start = off(0);
                for (i, (l, end)) in lens.iter_mut().zip(ends).enumerate() {
                    *l += if null(i) {
                        4
                    } else if plain {
                        2 + end - start
                    } else {
                        json::string_len(&d[start..end])
                    };
                    start = end;
                }
            }
            Data::Null => lens.iter_mut().for_each(|l| *l += 4),
            Data::Obj(_) => unreachable!("a column of Python values has no frame"),
        }
    }

    /// Rows `a..b` of the column into a chunk frame (frame.rs): its kind, its validity (a
    /// flag, then a byte per row), then its values (integers narrowed, `frame::ints`; 8 bytes
    /// per float; a byte per boolean; each string's length, `frame::ints`, and the strings' UTF-8).
    /// Only for a `framable` column.
    pub fn frame(&self, a: usize, b: usize, out: &mut Vec<u8>) {
        out.push(self.frame_kind().expect("a typed column"));
        match &self.valid {
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&v.as_bytes()[a..b]);
            }
            None => out.push(0),
        }
        match &self.data {
            Data::Int(x) => {
                // One slice of the rows, read 8 bytes at a time: no bounds check per value.
                let v: Vec<i64> = x.as_bytes()[8 * a..8 * b].chunks_exact(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
                crate::frame::ints(out, &v, self.valid.as_ref().map(|m| &m.as_bytes()[a..b]));
            }
            Data::Float(x) => out.extend_from_slice(&x.as_bytes()[8 * a..8 * b]),
            Data::Bool(x) => out.extend_from_slice(&x.as_bytes()[a..b]),
            Data::Str { offsets, data } => {
                // Rows a..b's offsets as one slice (b - a + 1 of them): each length is a
                // difference of neighbours, with no bounds check per row.
                let offs: Vec<i64> = offsets.as_bytes()[8 * a..8 * (b + 1)].chunks_exact(8)
                    .map(|w| i64::from_le_bytes(w.try_into().expect("8 bytes"))).collect();
                let lens: Vec<i64> = offs.windows(2).map(|w| w[1] - w[0]).collect();
                crate::frame::ints(out, &lens, None);
                out.extend_from_slice(&data.as_bytes()[offs[0] as usize..offs[b - a] as usize]);
            }
            Data::Null | Data::Obj(_) => {}
        }
    }

    /// Append row `i`'s JSON to `out`.
    pub fn json(&self, i: usize, out: &mut Vec<u8>) -> Result<(), Refused> {
        if self.null(i) {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        match &self.data {
            Data::Int(b) => json::int(out, i64::from_le_bytes(word(b.as_bytes(), i))),
            Data::Float(b) => {
                json::float(out, f64::from_le_bytes(word(b.as_bytes(), i)));
            }
            Data::Bool(b) => {
                out.extend_from_slice(if b.as_bytes()[i] != 0 { b"true" } else { b"false" })
            }
            Data::Str { .. } => {
                let s = self.str(i)?;
                json::string(out, s)
            }
            Data::Null => out.extend_from_slice(b"null"),
            Data::Obj(l) => {
                let v = l.get_item(i).map_err(|e| Refused::Json(e.to_string()))?;
                let mut nulled = false;
                json::write(out, &v, 1, &mut nulled).map_err(|e| Refused::Json(e.0))?;
            }
        }
        Ok(())
    }
}
