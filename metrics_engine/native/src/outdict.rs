//! The dict `ingest` returns per event, filled by entry index instead of by key.
//!
//! `ingest` copies a template dict (every metric name mapped to None, plan.rs `template`) and
//! sets each metric's value. `PyDict_SetItem` hashes nothing (names cache their hash) but
//! still probes the table and checks the key for every value: with W1's 240 misaligned
//! metrics that was about a third of an event's CPU. A copy of a template with no deleted
//! entry keeps its entries in insertion order, so a metric's value goes in its entry's value
//! slot directly (`Slots::put`). That reads CPython 3.11's dict layout (not public API), so
//! `Slots::of` takes a dict only on 3.11 and only in the shape a copy has (combined table,
//! entries as many as the names), and `put` checks the entry holds the very name object
//! before writing; anything else and the caller sets the item the public way.
//!
//! The dict of the call before is filled again when the caller has let go of it (the core
//! holds the only reference: nobody can see it change) and it still holds every name in its
//! entry: W1 per call drops each dict before the next call, and a copy and a free of a
//! 240-entry table (6.5 KiB) were a tenth of an event's CPU.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// CPython 3.11's `PyDictObject` (Include/cpython/dictobject.h).
#[repr(C)]
struct DictObject {
    ob_base: ffi::PyObject,
    ma_used: ffi::Py_ssize_t,
    ma_version_tag: u64,
    ma_keys: *mut KeysObject,
    ma_values: *mut std::ffi::c_void,
}

/// CPython 3.11's `PyDictKeysObject` (Include/internal/pycore_dict.h): the entries follow
/// `dk_indices`' `1 << dk_log2_index_bytes` bytes.
#[repr(C)]
struct KeysObject {
    dk_refcnt: ffi::Py_ssize_t,
    dk_log2_size: u8,
    dk_log2_index_bytes: u8,
    dk_kind: u8,
    dk_version: u32,
    dk_usable: ffi::Py_ssize_t,
    dk_nentries: ffi::Py_ssize_t,
    dk_indices: [u8; 0],
}

const DICT_KEYS_GENERAL: u8 = 0; // entries (hash, key, value)
const DICT_KEYS_UNICODE: u8 = 1; // entries (key, value)

/// Whether this interpreter's dicts have the layout above (CPython 3.11).
pub fn layout_known(py: Python<'_>) -> bool {
    let v = py.version_info();
    (v.major, v.minor) == (3, 11)
}

/// The entries of a dict that `of` found in a copy's shape: entry `i`'s key is at
/// `base + i * stride + key`, its value right after it.
pub struct Slots {
    base: *mut *mut ffi::PyObject,
    stride: usize,
    key: usize,
    n: usize,
}

impl Slots {
    /// `d`'s entries, if `known` (`layout_known`), `d` is a combined table of general or
    /// unicode entries, and it has exactly `n` entries, none deleted (a copy of a template
    /// of `n` distinct names).
    pub fn of(d: &Bound<'_, PyDict>, n: usize, known: bool) -> Option<Slots> {
        if !known {
            return None;
        }
        // SAFETY: on CPython 3.11 (`known`) a dict object has `DictObject`'s layout and its
        // `ma_keys` points to a live keys object of `KeysObject`'s layout, whose entries start
        // `1 << dk_log2_index_bytes` bytes after `dk_indices`; `d` holds the dict alive.
        unsafe {
            let dict = d.as_ptr().cast::<DictObject>();
            if !(*dict).ma_values.is_null() || (*dict).ma_used as usize != n {
                return None;
            }
            let keys = (*dict).ma_keys;
            if (*keys).dk_nentries as usize != n || (*keys).dk_refcnt != 1 {
                return None;
            }
            let (stride, key) = match (*keys).dk_kind {
                DICT_KEYS_GENERAL => (3, 1),
                DICT_KEYS_UNICODE => (2, 0),
                _ => return None,
            };
            let indices = std::ptr::addr_of_mut!((*keys).dk_indices).cast::<u8>();
            let base = indices.add(1usize << (*keys).dk_log2_index_bytes).cast::<*mut ffi::PyObject>();
            Some(Slots { base, stride, key, n })
        }
    }

    /// Whether entry `i` holds the key object `name`.
    pub fn holds(&self, i: usize, name: *mut ffi::PyObject) -> bool {
        // SAFETY: as `put`: `i < n` entries of the live dict, the key `key` pointers in.
        i < self.n && unsafe { *self.base.add(i * self.stride + self.key) == name }
    }

    /// Put `v` as the value of entry `i`, whose key must be the object `name` (the old value
    /// is released). Gives `v` back when it cannot: the entry holds another key, or `v` is an
    /// object the garbage collector tracks (the dict's tracking is `PyDict_SetItem`'s to keep;
    /// finalized values are ints, floats, bools, strings and None, which it does not track).
    pub fn put<'py>(&self, i: usize, name: *mut ffi::PyObject, v: Bound<'py, PyAny>)
                    -> Result<(), Bound<'py, PyAny>> {
        if i >= self.n {
            return Err(v);
        }
        // SAFETY: `i < n` entries of the live dict (`of`); an entry is `stride` pointers, its
        // key at `key` and its value after it. The slot's old value is a reference the dict
        // owns: released once it is out of the slot; `v`'s reference moves into the slot.
        unsafe {
            let e = self.base.add(i * self.stride + self.key);
            if *e != name || ffi::PyType_HasFeature(ffi::Py_TYPE(v.as_ptr()), ffi::Py_TPFLAGS_HAVE_GC) != 0 {
                return Err(v);
            }
            let slot = e.add(1);
            let old = std::mem::replace(&mut *slot, v.into_ptr());
            ffi::Py_DECREF(old);
        }
        Ok(())
    }
}
