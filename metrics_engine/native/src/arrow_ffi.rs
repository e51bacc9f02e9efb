//! A batch's metric columns handed to pyarrow as one record batch through the Arrow C data
//! interface (https://arrow.apache.org/docs/format/CDataInterface.html): pyarrow imports the
//! buffers this core filled (outcols.rs) without a copy and without a Python call per column
//! (405 for W2: building each array from Python was a few µs, per batch of rows).
//!
//! `Exported` owns the two C structs until pyarrow moves them (`RecordBatch._import_from_c`
//! at `addresses()`): an import takes their contents and leaves their `release` NULL; an
//! export never imported is released when `Exported` is dropped. The caller must not use
//! the addresses after dropping it, and must import them at most once.

use std::ffi::{c_char, c_void, CString};

use pyo3::prelude::*;

/// `struct ArrowSchema` of the C data interface.
#[repr(C)]
pub struct ArrowSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut ArrowSchema,
    dictionary: *mut ArrowSchema,
    release: Option<unsafe extern "C" fn(*mut ArrowSchema)>,
    private_data: *mut c_void,
}

/// `struct ArrowArray` of the C data interface.
#[repr(C)]
pub struct ArrowArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut ArrowArray,
    dictionary: *mut ArrowArray,
    release: Option<unsafe extern "C" fn(*mut ArrowArray)>,
    private_data: *mut c_void,
}

/// A field may hold nulls.
const NULLABLE: i64 = 2;

/// The memory a buffer pointer points into, owned by its array until released.
pub enum Owned {
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    U8(Vec<u8>),
}

/// Where an empty buffer points: an empty vector's pointer is dangling and unaligned, and a
/// NULL values buffer is not read the same way by every consumer.
static EMPTY: [u64; 1] = [0];

impl Owned {
    fn ptr(&self) -> *const c_void {
        let (p, empty): (*const c_void, bool) = match self {
            Owned::F64(v) => (v.as_ptr().cast(), v.is_empty()),
            Owned::I64(v) => (v.as_ptr().cast(), v.is_empty()),
            Owned::I32(v) => (v.as_ptr().cast(), v.is_empty()),
            Owned::U8(v) => (v.as_ptr().cast(), v.is_empty()),
        };
        if empty { EMPTY.as_ptr().cast() } else { p }
    }
}

/// A vector's pointer, or NULL when it is empty (the C structs' rule for absent arrays).
fn ptr_or_null<T>(v: &mut [T]) -> *mut T {
    if v.is_empty() { std::ptr::null_mut() } else { v.as_mut_ptr() }
}

/// One column: its Arrow format string ("g", "l", "b", "u", "n"), rows, nulls, and buffers in
/// the order the format has them (validity first: None when no row is null).
pub struct Column {
    pub format: &'static str,
    pub length: usize,
    pub nulls: usize,
    pub buffers: Vec<Option<Owned>>,
}

struct SchemaData {
    _format: CString,
    _name: CString,
    children: Vec<*mut ArrowSchema>,
}

struct ArrayData {
    _owned: Vec<Option<Owned>>,
    ptrs: Vec<*const c_void>,
    children: Vec<*mut ArrowArray>,
}

unsafe extern "C" fn release_schema(s: *mut ArrowSchema) {
    // SAFETY: called by the consumer (or `Exported::drop`) on a schema this module made and
    // did not release yet; a child moved out by the consumer has its `release` NULL.
    unsafe {
        let Some(s) = s.as_mut() else { return };
        if s.release.is_none() {
            return;
        }
        let data = Box::from_raw(s.private_data as *mut SchemaData);
        for &c in &data.children {
            if let Some(r) = (*c).release {
                r(c);
            }
            drop(Box::from_raw(c));
        }
        s.release = None;
        s.private_data = std::ptr::null_mut();
    }
}

unsafe extern "C" fn release_array(a: *mut ArrowArray) {
    // SAFETY: as `release_schema`.
    unsafe {
        let Some(a) = a.as_mut() else { return };
        if a.release.is_none() {
            return;
        }
        let data = Box::from_raw(a.private_data as *mut ArrayData);
        for &c in &data.children {
            if let Some(r) = (*c).release {
                r(c);
            }
            drop(Box::from_raw(c));
        }
        a.release = None;
        a.private_data = std::ptr::null_mut();
    }
}

fn schema(format: &str, name: &str, flags: i64, children: Vec<*mut ArrowSchema>) -> ArrowSchema {
    let format = CString::new(format).expect("a format has no NUL");
    // A metric name with a NUL byte cannot be a C string: cut there (names come from the
    // metric language, which has none).
    let name = CString::new(name.split('\0').next().unwrap_or_default()).expect("cut at NUL");
    let mut data = Box::new(SchemaData { _format: format, _name: name, children });
    let s = ArrowSchema {
        format: data._format.as_ptr(),
        name: data._name.as_ptr(),
        metadata: std::ptr::null(),
        flags,
        n_children: data.children.len() as i64,
        children: ptr_or_null(&mut data.children),
        dictionary: std::ptr::null_mut(),
        release: Some(release_schema),
        private_data: std::ptr::null_mut(),
    };
    ArrowSchema { private_data: Box::into_raw(data).cast(), ..s }
}

fn array(length: usize, nulls: usize, buffers: Vec<Option<Owned>>, children: Vec<*mut ArrowArray>)
         -> ArrowArray {
    let ptrs: Vec<*const c_void> =
        buffers.iter().map(|b| b.as_ref().map_or(std::ptr::null(), |o| o.ptr())).collect();
    let mut data = Box::new(ArrayData { _owned: buffers, ptrs, children });
    let a = ArrowArray {
        length: length as i64,
        null_count: nulls as i64,
        offset: 0,
        n_buffers: data.ptrs.len() as i64,
        n_children: data.children.len() as i64,
        buffers: ptr_or_null(&mut data.ptrs),
        children: ptr_or_null(&mut data.children),
        dictionary: std::ptr::null_mut(),
        release: Some(release_array),
        private_data: std::ptr::null_mut(),
    };
    ArrowArray { private_data: Box::into_raw(data).cast(), ..a }
}

/// A record batch of `rows` rows, exported, until pyarrow imports it.
#[pyclass(module = "railflow_metrics_native")]
pub struct Exported {
    array: *mut ArrowArray,
    schema: *mut ArrowSchema,
    /// A hash of the columns' names and formats (`schema_key`).
    key: u64,
}

// SAFETY: the structs are owned here alone (until moved out by an import) and touched only
// with the GIL held, through `&mut self` or drop.
unsafe impl Send for Exported {}
unsafe impl Sync for Exported {}

impl Exported {
    /// The batch of `columns` (name, column), `rows` rows each.
    pub fn new(columns: Vec<(String, Column)>, rows: usize) -> Exported {
        use std::hash::{Hash, Hasher};
        let mut fields = Vec::with_capacity(columns.len());
        let mut arrays = Vec::with_capacity(columns.len());
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (name, c) in columns {
            (name.as_str(), c.format).hash(&mut h);
            fields.push(Box::into_raw(Box::new(schema(c.format, &name, NULLABLE, vec![]))));
            arrays.push(Box::into_raw(Box::new(array(c.length, c.nulls, c.buffers, vec![]))));
        }
        // A struct array of the columns: its one buffer, validity, is absent (no null rows).
        let schema = Box::into_raw(Box::new(schema("+s", "", 0, fields)));
        let array = Box::into_raw(Box::new(array(rows, 0, vec![None], arrays)));
        Exported { array, schema, key: h.finish() }
    }
}

#[pymethods]
impl Exported {
    /// The addresses of the `ArrowArray` and `ArrowSchema` structs, for
    /// `pyarrow.RecordBatch._import_from_c`.
    fn addresses(&self) -> (usize, usize) {
        (self.array as usize, self.schema as usize)
    }

    /// A hash of the batch's column names and formats: two exports of equal keys have the
    /// same schema, so the importer may import the schema once and then only the arrays
    /// (`_import_from_c(array, schema)`; the schema struct is then released here).
    fn schema_key(&self) -> u64 {
        self.key
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: both were made by `Box::into_raw` in `new` and are freed only here; an
        // import left their `release` NULL (nothing left to release), else they are released.
        unsafe {
            if let Some(r) = (*self.array).release {
                r(self.array);
            }
            if let Some(r) = (*self.schema).release {
                r(self.schema);
            }
            drop(Box::from_raw(self.array));
            drop(Box::from_raw(self.schema));
        }
    }
}
