//! A batch's metric values as columns (`ingest_arrays`, plan.rs): one column per metric, of a
//! type fixed by the metric and the type of its field in the batch (plan.py `value_kind`
//! decides; this module fills it), handed to Python as Arrow's buffers so a batch makes no
//! Python object per value.
//!
//! - COUNT, COUNT DISTINCT, TIME_SINCE_LAST: int64; AVG, the variances and deviations,
//!   SKEWNESS, RATIO: float64 (`lower_typed` makes their values natively).
//! - SUM, MIN, MAX, OLDEST, RECENT: the kind plan.py asks for: int64, float64, bool, string or
//!   null. A value goes in only if the column's type holds it exactly (an int in a float64
//!   column only if the float equals it; a float in an int64 column only if it is integral
//!   and in range). A value that does not fit (a SUM beyond 64 bits, a fraction in an int64
//!   column, a string in a number column) makes the column a *misfit*: the batch then hands
//!   back every field-typed column as the list `ingest_many` gives without columns (rebuilt
//!   exactly from the values kept in `orig`/`odd`), and plan.py raises `MetricOutputError`.
//!   Values are never rounded, wrapped or dropped silently.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyList, PyString};

use crate::aggregations::Typed;
use crate::arrow_ffi::{Column, Owned};
use crate::value::{to_py, Interner, Val};

/// The values of one column (the validity bits are beside it, in `ArrowCol`).
enum Buf {
    F(Vec<f64>),
    I(Vec<i64>),
    /// Bit-packed values (LSB first), as Arrow's boolean arrays hold them.
    B(Vec<u8>),
    /// Arrow string offsets (int32, starting at 0) and the UTF-8 data.
    S(Vec<i32>, Vec<u8>),
    N,
}

pub struct ArrowCol {
    buf: Buf,
    valid: Vec<u8>,
    nulls: usize,
    n: usize,
    /// A field-typed column (SUM, MIN, MAX, OLDEST, RECENT): its values may not fit.
    field_typed: bool,
    /// Rows the column holds converted (an int in a float64 column) or not at all (a misfit),
    /// with the value the list would hold; `odd`: rows whose object only `finalize` makes (a
    /// sum held in arbitrary precision). Both in row order, for rebuilding the list.
    orig: Vec<(usize, Val)>,
    odd: Vec<(usize, PyObject)>,
    /// The first row whose value did not fit.
    pub misfit: Option<usize>,
}

/// One row's value of a column as a batch keeps it for a few rows before writing them
/// column by column (plan.rs): null, a value the column holds as it is (`CELL_NATIVE`: an
/// f64's bits in a float64 column, an i64 in an int64 one), or (`CELL_VAL`, `CELL_OBJ`)
/// one that `push_val` / `push_obj` must take, `bits` its place in the batch's side list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub tag: u8,
    pub bits: u64,
}

pub const CELL_NULL: u8 = 0;
pub const CELL_NATIVE: u8 = 1;
pub const CELL_VAL: u8 = 2;
pub const CELL_OBJ: u8 = 3;

impl Cell {
    pub const NULL: Cell = Cell { tag: CELL_NULL, bits: 0 };

    pub fn native(bits: u64) -> Cell {
        Cell { tag: CELL_NATIVE, bits }
    }

    /// A value `lower_typed` made (always fits its column: null or native).
    pub fn typed(v: Typed) -> Cell {
        match v {
            Typed::F(Some(x)) => Cell::native(x.to_bits()),
            Typed::I(Some(x)) => Cell::native(x as u64),
            Typed::F(None) | Typed::I(None) => Cell::NULL,
        }
    }
}

/// One metric's values of a batch: Python objects (no columns asked for), or a column.
pub enum OutCol {
    Obj(Vec<PyObject>),
    Arrow(ArrowCol),
}

/// Values as little-endian bytes: on a little-endian machine their memory as it is (one copy
/// into Python's bytes, not a second one through a byte vector made value by value).
fn le_bytes<T: Copy, const N: usize>(d: &[T], le: impl Fn(&T) -> [u8; N])
                                     -> std::borrow::Cow<'_, [u8]> {
    if cfg!(target_endian = "little") && std::mem::size_of::<T>() == N {
        // SAFETY: `T` is f64, i64 or i32 here: `N` bytes each, no padding, any bits valid as
        // bytes; the slice borrows `d`.
        let raw = unsafe { std::slice::from_raw_parts(d.as_ptr().cast::<u8>(), std::mem::size_of_val(d)) };
        return std::borrow::Cow::Borrowed(raw);
    }
    std::borrow::Cow::Owned(d.iter().flat_map(le).collect())
}

const I64_AS_F64_MAX: f64 = 9_223_372_036_854_775_808.0; // 2**63

/// The float equal to `i`, if there is one.
fn exact_f64(i: i128) -> Option<f64> {
    let f = i as f64;
    // `f` is the nearest float; it equals `i` iff converting back gives `i` (and |f| < 2**127,
    // so the conversion back does not saturate).
    (f.abs() < 1.0e38 && f as i128 == i).then_some(f)
}

/// The int64 equal to `x`, if there is one.
fn exact_i64(x: f64) -> Option<i64> {
    (x.is_finite() && x.fract() == 0.0 && (-I64_AS_F64_MAX..I64_AS_F64_MAX).contains(&x))
        .then_some(x as i64)
}

impl OutCol {
    /// A column for `n` rows: a list when `arrow` is false; else of the type `lower_typed`
    /// gives the function (`natural`: `Some(Typed::F | Typed::I)`), or else of `kind` (`"i"`,
    /// `"f"`, `"b"`, `"s"`, `"n"`, plan.py `value_kind`).
    pub fn new(arrow: bool, natural: Option<Typed>, kind: &str, n: usize) -> OutCol {
        if !arrow {
            return OutCol::Obj(Vec::with_capacity(n));
        }
        let (buf, field_typed) = match (natural, kind) {
            (Some(Typed::F(_)), _) => (Buf::F(Vec::with_capacity(n)), false),
            (Some(Typed::I(_)), _) => (Buf::I(Vec::with_capacity(n)), false),
            (None, "i") => (Buf::I(Vec::with_capacity(n)), true),
            (None, "b") => (Buf::B(vec![0u8; n.div_ceil(8)]), true),
            (None, "s") => {
                let mut o = Vec::with_capacity(n + 1);
                o.push(0);
                (Buf::S(o, Vec::new()), true)
            }
            (None, "n") => (Buf::N, true),
            (None, _) => (Buf::F(Vec::with_capacity(n)), true),
        };
        OutCol::Arrow(ArrowCol { buf, valid: vec![0u8; n.div_ceil(8)], nulls: 0, n: 0,
                                 field_typed, orig: vec![], odd: vec![], misfit: None })
    }
}

impl ArrowCol {
    fn set_valid(&mut self) {
        self.valid[self.n / 8] |= 1 << (self.n % 8);
    }

    fn push_null(&mut self) {
        match &mut self.buf {
            Buf::F(d) => d.push(0.0),
            Buf::I(d) => d.push(0),
            Buf::S(o, _) => o.push(*o.last().unwrap_or(&0)),
            Buf::B(_) | Buf::N => {}
        }
        self.nulls += 1;
        self.n += 1;
    }

    /// A value of a function `lower_typed` answers (COUNT, AVG, ...): always fits.
    pub fn push_typed(&mut self, v: Typed) {
        match (&mut self.buf, v) {
            (Buf::F(d), Typed::F(Some(x))) => d.push(x),
            (Buf::I(d), Typed::I(Some(x))) => d.push(x),
            (Buf::F(d), Typed::F(None)) => {
                d.push(0.0);
                self.nulls += 1;
                self.n += 1;
                return;
            }
            (Buf::I(d), Typed::I(None)) => {
                d.push(0);
                self.nulls += 1;
                self.n += 1;
                return;
            }
            _ => unreachable!("a typed column takes its function's typed value"),
        }
        self.set_valid();
        self.n += 1;
    }

    /// `v` as a cell (see `Cell`) when the column holds it as it is, with nothing to keep
    /// for the list: null, a float in a float64 column, an int within 64 bits in an int64
    /// one (what `push_val` pushes unconverted). None: `push_val` must take it.
    pub fn val_cell(&self, v: &Val) -> Option<Cell> {
        match (&self.buf, v) {
            (_, Val::Null) => Some(Cell::NULL),
            (Buf::F(_), Val::Float(x)) => Some(Cell::native(x.to_bits())),
            (Buf::I(_), Val::Int(i)) => i64::try_from(*i).ok().map(|x| Cell::native(x as u64)),
            _ => None,
        }
    }

    /// One null or native cell (`Cell`): what `push_typed` or `push_val` would push.
    pub fn push_cell(&mut self, c: Cell) {
        if c.tag == CELL_NULL {
            return self.push_null();
        }
        match &mut self.buf {
            Buf::F(d) => d.push(f64::from_bits(c.bits)),
            Buf::I(d) => d.push(c.bits as i64),
            _ => unreachable!("a native cell is of a float64 or int64 column"),
        }
        self.set_valid();
        self.n += 1;
    }

    /// A block of rows' null and native cells (`tags`, `bits`: one each per row), as
    /// `push_cell` one by one would push them, without a branch on the column's type per row.
    /// A null's value is 0 whatever its `bits` (masked, no branch); the validity bits of
    /// eight rows that fill a byte are gathered at once from their tags (W2's 405 columns:
    /// a read-modify-write of the same byte per row was half of this function's time).
    pub fn push_cells(&mut self, tags: &[u8], bits: &[u64]) {
        let n0 = self.n;
        // A native cell's bits, or 0 for a null: `tags` holds only `CELL_NULL` (0) and
        // `CELL_NATIVE` (1) here, so the mask is all ones or zero.
        let masked = |(&t, &b): (&u8, &u64)| b & ((t == CELL_NATIVE) as u64).wrapping_neg();
        match &mut self.buf {
            Buf::F(d) => d.extend(tags.iter().zip(bits).map(|c| f64::from_bits(masked(c)))),
            Buf::I(d) => d.extend(tags.iter().zip(bits).map(|c| masked(c) as i64)),
            _ => {
                for &t in tags {
                    debug_assert_eq!(t, CELL_NULL, "a native cell is of a float64 or int64 column");
                    self.push_null();
                }
                return;
            }
        }
        let mut set = 0; // rows valid
        let mut r = 0;
        while r < tags.len() {
            let row = n0 + r;
            if row % 8 == 0 && r + 8 <= tags.len() {
                let x = u64::from_le_bytes(tags[r..r + 8].try_into().expect("eight tags"));
                debug_assert_eq!(x & !0x0101_0101_0101_0101, 0, "tags are 0 or 1 here");
                // Byte k's low bit to bit k (LSB first, as Arrow's validity bits are).
                let byte = (x.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8;
                self.valid[row / 8] |= byte;
                set += byte.count_ones() as usize;
                r += 8;
                continue;
            }
            if tags[r] == CELL_NATIVE {
                self.valid[row / 8] |= 1 << (row % 8);
                set += 1;
            }
            r += 1;
        }
        self.nulls += tags.len() - set;
        self.n += tags.len();
    }

    /// A row the column cannot hold: null here, its value kept for the list.
    fn push_misfit(&mut self, v: Val) {
        self.misfit.get_or_insert(self.n);
        self.orig.push((self.n, v));
        self.push_null();
    }

    /// SUM/MIN/MAX/OLDEST/RECENT's scalar (`lower_scalar`), exactly or as a misfit.
    pub fn push_val(&mut self, py: Python<'_>, v: Val, strings: &Interner) {
        let row = self.n;
        if v.is_null() {
            return self.push_null();
        }
        // (whether the column holds `v` exactly, whether converted: an int as a float, ...)
        let (fits, converted) = match (&mut self.buf, v) {
            (Buf::F(d), Val::Float(x)) => {
                d.push(x);
                (true, false)
            }
            (Buf::F(d), Val::Int(i)) => match exact_f64(i) {
                Some(x) => {
                    d.push(x);
                    (true, true)
                }
                None => (false, false),
            },
            (Buf::F(d), Val::Bool(b)) => {
                d.push(b as u8 as f64);
                (true, true)
            }
            (Buf::I(d), Val::Int(i)) => match i64::try_from(i) {
                Ok(x) => {
                    d.push(x);
                    (true, false)
                }
                Err(_) => (false, false),
            },
            (Buf::I(d), Val::Float(x)) => match exact_i64(x) {
                Some(i) => {
                    d.push(i);
                    (true, true)
                }
                None => (false, false),
            },
            (Buf::I(d), Val::Bool(b)) => {
                d.push(b as i64);
                (true, true)
            }
            (Buf::B(bits), Val::Bool(b)) => {
                if b {
                    bits[row / 8] |= 1 << (row % 8);
                }
                (true, false)
            }
            (Buf::S(o, data), Val::Str(id)) => {
                data.extend_from_slice(strings.text(py, id).as_bytes());
                match i32::try_from(data.len()) {
                    Ok(end) => {
                        o.push(end);
                        (true, false)
                    }
                    Err(_) => {
                        // Beyond Arrow's 2 GiB of string data per array: the list instead.
                        let keep = *o.last().unwrap_or(&0) as usize;
                        data.truncate(keep);
                        (false, false)
                    }
                }
            }
            _ => (false, false),
        };
        if !fits {
            return self.push_misfit(v);
        }
        if converted {
            self.orig.push((row, v));
        }
        self.set_valid();
        self.n += 1;
    }

    /// A value only `finalize` makes the object of (a sum in arbitrary precision): in an
    /// int64 or float64 column when it equals one, else a misfit.
    pub fn push_obj(&mut self, obj: PyObject, py: Python<'_>) {
        let row = self.n;
        let int = obj.bind(py).extract::<i64>().ok();
        let fits = match (&mut self.buf, int) {
            (Buf::I(d), Some(i)) => {
                d.push(i);
                true
            }
            (Buf::F(d), Some(i)) => match exact_f64(i as i128) {
                Some(x) => {
                    d.push(x);
                    true
                }
                None => false,
            },
            _ => false,
        };
        self.odd.push((row, obj));
        if fits {
            self.set_valid();
            self.n += 1;
        } else {
            self.misfit.get_or_insert(row);
            self.push_null();
        }
    }

    /// The list `ingest_many` gives without columns, rebuilt from the column and the kept
    /// values.
    fn to_list(&self, py: Python<'_>, strings: &Interner) -> PyResult<PyObject> {
        let mut objs: Vec<PyObject> = Vec::with_capacity(self.n);
        let (mut oi, mut di) = (0, 0);
        for i in 0..self.n {
            if di < self.odd.len() && self.odd[di].0 == i {
                objs.push(self.odd[di].1.clone_ref(py));
                di += 1;
                continue;
            }
            if oi < self.orig.len() && self.orig[oi].0 == i {
                objs.push(to_py(py, &self.orig[oi].1, strings));
                oi += 1;
                continue;
            }
            if self.valid[i / 8] & (1 << (i % 8)) == 0 {
                objs.push(py.None());
                continue;
            }
            objs.push(match &self.buf {
                Buf::F(d) => PyFloat::new(py, d[i]).into_any().unbind(),
                Buf::I(d) => d[i].into_pyobject(py)?.into_any().unbind(),
                Buf::B(b) => PyBool::new(py, b[i / 8] & (1 << (i % 8)) != 0).to_owned().into_any().unbind(),
                Buf::S(o, data) => {
                    let s = std::str::from_utf8(&data[o[i] as usize..o[i + 1] as usize])
                        .unwrap_or_default();
                    PyString::new(py, s).into_any().unbind()
                }
                Buf::N => py.None(),
            });
        }
        Ok(PyList::new(py, objs)?.into_any().unbind())
    }
}

impl OutCol {
    /// The column's buffers, moved as they are, for the Arrow C data interface (arrow_ffi.rs;
    /// the same arrays `into_py`'s buffers make). None for a list.
    pub fn into_ffi(self) -> Option<Column> {
        let c = match self {
            OutCol::Obj(_) => return None,
            OutCol::Arrow(c) => c,
        };
        let valid = (c.nulls > 0).then_some(Owned::U8(c.valid));
        let (format, data) = match c.buf {
            Buf::F(d) => ("g", vec![Owned::F64(d)]),
            Buf::I(d) => ("l", vec![Owned::I64(d)]),
            Buf::B(b) => ("b", vec![Owned::U8(b)]),
            Buf::S(o, d) => ("u", vec![Owned::I32(o), Owned::U8(d)]),
            Buf::N => return Some(Column { format: "n", length: c.n, nulls: c.n, buffers: vec![] }),
        };
        let mut buffers = vec![valid];
        buffers.extend(data.into_iter().map(Some));
        Some(Column { format, length: c.n, nulls: c.nulls, buffers })
    }

    pub fn misfit(&self) -> Option<usize> {
        match self {
            OutCol::Arrow(c) => c.misfit,
            OutCol::Obj(_) => None,
        }
    }

    /// The list (no columns asked for; or, `lists`, a field-typed column of a batch where a
    /// value did not fit), or the column as Arrow's buffers: `("f8" | "i8", values, validity,
    /// nulls)`, `("b", value bits, validity, nulls)`, `("s", int32 offsets, data, validity,
    /// nulls)` or `("n", rows)`; little-endian, bits LSB first.
    pub fn into_py(self, py: Python<'_>, strings: &Interner, lists: bool) -> PyResult<PyObject> {
        let c = match self {
            OutCol::Obj(v) => return Ok(PyList::new(py, v)?.into_any().unbind()),
            OutCol::Arrow(c) => c,
        };
        if lists && c.field_typed {
            return c.to_list(py, strings);
        }
        let bytes = |b: &[u8]| PyBytes::new(py, b).into_any().unbind();
        let valid = bytes(&c.valid);
        let t = match &c.buf {
            Buf::F(d) => {
                let raw = le_bytes(d, |x| x.to_le_bytes());
                ("f8", bytes(&raw[..]), valid, c.nulls).into_pyobject(py)?.into_any().unbind()
            }
            Buf::I(d) => {
                let raw = le_bytes(d, |x| x.to_le_bytes());
                ("i8", bytes(&raw[..]), valid, c.nulls).into_pyobject(py)?.into_any().unbind()
            }
            Buf::B(b) => ("b", bytes(b), valid, c.nulls).into_pyobject(py)?.into_any().unbind(),
            Buf::S(o, data) => {
                let raw = le_bytes(o, |x| x.to_le_bytes());
                ("s", bytes(&raw[..]), bytes(data), valid, c.nulls).into_pyobject(py)?.into_any().unbind()
            }
            Buf::N => ("n", c.n).into_pyobject(py)?.into_any().unbind(),
        };
        Ok(t)
    }
}
