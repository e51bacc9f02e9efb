//! Scalars lowered from Python events, the string interner, and the byte codec used by
//! snapshots and digests.
//!
//! Equality is the engine's grouping rule: numbers compare by value (`1` and `1.0` are one
//! key, one distinct value), booleans are not numbers (`true` is not `1`), strings by content,
//! and null is its own value. A `Val` keeps the type it came with, so OLDEST/RECENT/MIN/MAX
//! give back the value they were given.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use rustc_hash::FxHashMap;

#[derive(Clone, Copy, Debug)]
pub enum Val {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(u32),
}

/// The integer an integral float equals (None when it has a fraction or no i128 equals it).
fn integral(f: f64) -> Option<i128> {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1.7e38 {
        Some(f as i128)
    } else {
        None
    }
}

impl Val {
    /// The representative of this value's equality class (integral floats become ints).
    pub fn canonical(self) -> Val {
        match self {
            Val::Float(f) => integral(f).map(Val::Int).unwrap_or(Val::Float(f)),
            v => v,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Val::Null)
    }

    /// A finite number (int, float or bool): what SUM/AVG/MIN/MAX take.
    pub fn is_numeric(&self) -> bool {
        match self {
            Val::Int(_) | Val::Bool(_) => true,
            Val::Float(f) => f.is_finite(),
            _ => false,
        }
    }

    /// Exact numeric order of two numeric values (Python's int/float comparison).
    pub fn num_cmp(&self, o: &Val) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        fn as_int(v: &Val) -> Option<i128> {
            match v {
                Val::Int(i) => Some(*i),
                Val::Bool(b) => Some(*b as i128),
                _ => None,
            }
        }
        match (as_int(self), as_int(o)) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(a), None) => int_float_cmp(a, o.float()),
            (None, Some(b)) => int_float_cmp(b, self.float()).reverse(),
            (None, None) => self.float().partial_cmp(&o.float()).unwrap_or(Ordering::Equal),
        }
    }

    fn float(&self) -> f64 {
        match self {
            Val::Float(f) => *f,
            _ => 0.0,
        }
    }
}

fn int_float_cmp(a: i128, f: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let fl = f.floor();
    if fl >= 1.7e38 {
        return Ordering::Less;
    }
    if fl <= -1.7e38 {
        return Ordering::Greater;
    }
    let fi = fl as i128;
    match a.cmp(&fi) {
        Ordering::Equal => {
            if f > fl {
                Ordering::Less
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

impl PartialEq for Val {
    fn eq(&self, o: &Val) -> bool {
        match (self.canonical(), o.canonical()) {
            (Val::Null, Val::Null) => true,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Int(a), Val::Int(b)) => a == b,
            (Val::Float(a), Val::Float(b)) => a.to_bits() == b.to_bits(),
            (Val::Str(a), Val::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Val {}

/// splitmix64's finalizer: spreads small, sequential codes (interned string ids) over all
/// 64 bits, so the table's fast hasher sees well-mixed input.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

impl Hash for Val {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let code = match self.canonical() {
            Val::Null => 0,
            Val::Bool(b) => 1 | ((b as u64) << 8),
            Val::Int(i) => mix(2 ^ (i as u64) ^ (((i >> 64) as u64).rotate_left(17))),
            Val::Float(f) => mix(3 ^ f.to_bits()),
            Val::Str(s) => 4 | ((s as u64) << 8),
        };
        h.write_u64(mix(code));
    }
}

/// Strings seen by one stream's core, by id (ids never leave the process). Each text is kept
/// once, shared by the lookup map and `texts`: a snapshot's dump reads every key's text
/// without touching its Python string (a cache miss per key, a third of the dump's time).
#[derive(Default)]
pub struct Interner {
    map: FxHashMap<Arc<str>, u32>,
    strs: Vec<Py<PyString>>,
    texts: Texts,
}

/// The texts of an interner by id, in shared blocks of `TEXT_BLOCK`: ids are only ever
/// added, so a copy (`Interner::texts_only`, a snapshot's frozen view) shares every full
/// block and costs a pointer per block, not a reference count per string.
#[derive(Clone, Default)]
struct Texts(Vec<Arc<Vec<Arc<str>>>>);

const TEXT_BLOCK: usize = 1024;

impl Texts {
    fn push(&mut self, t: Arc<str>) {
        match self.0.last_mut() {
            // A block a copy shares is copied once here (at most `TEXT_BLOCK` texts).
            Some(b) if b.len() < TEXT_BLOCK => Arc::make_mut(b).push(t),
            _ => {
                let mut b = Vec::with_capacity(TEXT_BLOCK);
                b.push(t);
                self.0.push(Arc::new(b));
            }
        }
    }

    fn get(&self, id: u32) -> &str {
        let i = id as usize;
        &self.0[i / TEXT_BLOCK][i % TEXT_BLOCK]
    }
}

impl Interner {
    pub fn intern(&mut self, s: &Bound<'_, PyString>) -> PyResult<u32> {
        let t = s.to_str()?;
        if let Some(&id) = self.map.get(t) {
            return Ok(id);
        }
        let id = self.strs.len() as u32;
        self.strs.push(s.clone().unbind());
        let text: Arc<str> = t.into();
        self.texts.push(text.clone());
        self.map.insert(text, id);
        Ok(id)
    }

    pub fn intern_str(&mut self, py: Python<'_>, t: &str) -> u32 {
        if let Some(&id) = self.map.get(t) {
            return id;
        }
        let id = self.strs.len() as u32;
        self.strs.push(PyString::new(py, t).unbind());
        let text: Arc<str> = t.into();
        self.texts.push(text.clone());
        self.map.insert(text, id);
        id
    }

    pub fn text<'a>(&'a self, _py: Python<'a>, id: u32) -> &'a str {
        self.texts.get(id)
    }

    /// The text of id `id`, without the GIL (a snapshot written on another thread).
    pub fn text_of(&self, id: u32) -> &str {
        self.texts.get(id)
    }

    /// A copy that only reads texts (`text_of`): no lookup map, no Python string, so it is
    /// made and dropped without the GIL. It shares this interner's full text blocks.
    pub fn texts_only(&self) -> Interner {
        Interner { map: FxHashMap::default(), strs: vec![], texts: self.texts.clone() }
    }
}

/// Why a Python value cannot be lowered.
pub enum LowerError {
    NotScalar(String),
    OutOfRange,
}

/// A Python scalar as a `Val`; lists, dicts and other objects are refused.
pub fn lower(v: &Bound<'_, PyAny>, strings: &mut Interner) -> Result<Val, LowerError> {
    if v.is_none() {
        return Ok(Val::Null);
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return strings.intern(s).map(Val::Str).map_err(|_| LowerError::OutOfRange);
    }
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(Val::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        // 64 bits: what the reservoir's JSON keeps exactly (sums go past it, exactly).
        return v.extract::<i64>().map(|i| Val::Int(i as i128)).map_err(|_| LowerError::OutOfRange);
    }
    if let Ok(f) = v.downcast::<PyFloat>() {
        // NaN and infinities are null: the reservoir's JSON keeps them so, and an event must
        // count the same whether a window takes it live or reads it back.
        let x = f.value();
        return Ok(if x.is_finite() { Val::Float(x) } else { Val::Null });
    }
    Err(LowerError::NotScalar(v.get_type().name().map(|n| n.to_string()).unwrap_or_default()))
}

pub fn to_py(py: Python<'_>, v: &Val, strings: &Interner) -> PyObject {
    match v {
        Val::Null => py.None(),
        Val::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Val::Int(i) => i.into_pyobject(py).map(|o| o.into_any().unbind()).unwrap_or(py.None()),
        Val::Float(f) => PyFloat::new(py, *f).into_any().unbind(),
        Val::Str(s) => strings.strs[*s as usize].clone_ref(py).into_any(),
    }
}

// -- bytes ----------------------------------------------------------------------------------

#[derive(Default)]
pub struct Out {
    pub buf: Vec<u8>,
}

impl Out {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
    }
    pub fn val(&mut self, v: &Val, strings: &Interner) {
        match v {
            Val::Null => self.u8(0),
            Val::Bool(b) => {
                self.u8(1);
                self.u8(*b as u8)
            }
            Val::Int(i) => {
                self.u8(2);
                self.buf.extend_from_slice(&i.to_le_bytes())
            }
            Val::Float(f) => {
                self.u8(3);
                self.buf.extend_from_slice(&f.to_bits().to_le_bytes())
            }
            Val::Str(s) => {
                self.u8(4);
                self.bytes(strings.text_of(*s).as_bytes())
            }
        }
    }
}

pub struct In<'a> {
    pub buf: &'a [u8],
    pub at: usize,
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> PyResult<&'a [u8]> {
        if self.at + n > self.buf.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("truncated native state"));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    pub fn done(&self) -> bool {
        self.at >= self.buf.len()
    }
    pub fn u8(&mut self) -> PyResult<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> PyResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> PyResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn i64(&mut self) -> PyResult<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn bytes(&mut self) -> PyResult<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn val(&mut self, py: Python<'_>, strings: &mut Interner) -> PyResult<Val> {
        Ok(match self.u8()? {
            0 => Val::Null,
            1 => Val::Bool(self.u8()? != 0),
            2 => Val::Int(i128::from_le_bytes(self.take(16)?.try_into().unwrap())),
            3 => Val::Float(f64::from_bits(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))),
            4 => {
                let b = self.bytes()?;
                let t = std::str::from_utf8(b)
                    .map_err(|_| pyo3::exceptions::PyValueError::new_err("bad string"))?;
                Val::Str(strings.intern_str(py, t))
            }
            t => return Err(pyo3::exceptions::PyValueError::new_err(format!("bad tag {t}"))),
        })
    }
}
