//! Events to JSON for the reservoir's chunks, natively (the bytes `orjson.loads` reads back to
//! the same event): null, booleans, 64-bit integers, finite floats (non-finite ones become
//! null, as orjson writes them; `event` says when it did, so the caller can take the event
//! as it will be read back), strings, lists, tuples and dicts with string keys.

use std::io::Write;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Decimal digits of `i`, without `core::fmt` (two integers per event, on the ingest path).
pub fn int(out: &mut Vec<u8>, i: i64) {
    if i < 0 {
        out.push(b'-');
    }
    let mut n = i.unsigned_abs(); // i64::MIN has no positive i64, but a u64
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// The length of `int`'s output for `i`.
pub fn int_len(i: i64) -> usize {
    i.unsigned_abs().checked_ilog10().map_or(1, |d| d as usize + 1) + (i < 0) as usize
}

/// The length of `float`'s output for `x` (counted, not written).
pub fn float_len(x: f64) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    if !x.is_finite() {
        return 4; // null
    }
    let mut c = Count(0);
    let _ = std::fmt::write(&mut c, format_args!("{x:?}"));
    c.0
}

/// Whether `string` escapes any byte of `b` (then `string_len` must count them).
pub fn escapes_any(b: &[u8]) -> bool {
    // No early exit: the loop vectorizes, and most buffers have nothing to escape.
    b.iter().fold(false, |a, &c| a | (c < 0x20) | (c == b'"') | (c == b'\\'))
}

/// The length of `string`'s output for the UTF-8 bytes `b`.
pub fn string_len(b: &[u8]) -> usize {
    2 + b.len() + b.iter().map(|&c| match c {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' => 1,
        0..=0x1f => 5,
        _ => 0,
    }).sum::<usize>()
}

/// Why a value has no JSON form.
pub struct NotJson(pub String);

pub fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: Option<&[u8]> = match c {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&b[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{:04x}", c).as_bytes()),
        }
        start = i + 1;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

/// A float's JSON (the shortest round trip, with ".0" on integral values); a non-finite one
/// is written as null, and then this returns false.
pub fn float(out: &mut Vec<u8>, x: f64) -> bool {
    if x.is_finite() {
        let _ = write!(out, "{x:?}");
        true
    } else {
        out.extend_from_slice(b"null");
        false
    }
}

/// Append the JSON of `v` to `out`.
pub fn write(out: &mut Vec<u8>, v: &Bound<'_, PyAny>, depth: u32, nulled: &mut bool)
             -> Result<(), NotJson> {
    if depth > 64 {
        return Err(NotJson("nests deeper than 64 levels".into()));
    }
    if v.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(s) = v.downcast::<PyString>() {
        string(out, s.to_str().map_err(|_| NotJson("holds a string that is not UTF-8".into()))?);
    } else if let Ok(b) = v.downcast::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if v.is_instance_of::<PyInt>() {
        let i: i64 = v.extract().map_err(|_| NotJson("holds an integer outside 64 bits".into()))?;
        int(out, i);
    } else if let Ok(f) = v.downcast::<PyFloat>() {
        if !float(out, f.value()) {
            *nulled = true;
        }
    } else if let Ok(d) = v.downcast::<PyDict>() {
        out.push(b'{');
        for (i, (k, x)) in d.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let k = k.downcast::<PyString>().map_err(|_| NotJson("has a key that is not a string".into()))?;
            string(out, k.to_str().map_err(|_| NotJson("has a key that is not UTF-8".into()))?);
            out.push(b':');
            write(out, &x, depth + 1, nulled)?;
        }
        out.push(b'}');
    } else if let Ok(l) = v.downcast::<PyList>() {
        out.push(b'[');
        for (i, x) in l.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write(out, &x, depth + 1, nulled)?;
        }
        out.push(b']');
    } else if let Ok(t) = v.downcast::<PyTuple>() {
        out.push(b'[');
        for (i, x) in t.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write(out, &x, depth + 1, nulled)?;
        }
        out.push(b']');
    } else {
        let t = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return Err(NotJson(format!("holds a {t}, which has no JSON form")));
    }
    Ok(())
}

/// The JSON (`"name":`) of the top-level keys of recent events, by the key object: a
/// service's events (orjson's key cache) and the rows of a batch or a table (one name object
/// per column) bring the same key objects event after event, so each key is escaped and
/// written once, not per event. Direct-mapped by address; an entry holds its key, so the
/// address cannot be taken by another object while it is cached.
pub struct KeyCache {
    slots: Vec<Option<(Py<PyString>, Vec<u8>)>>,
}

const KEY_SLOTS: usize = 64;

impl Default for KeyCache {
    fn default() -> KeyCache {
        KeyCache { slots: (0..KEY_SLOTS).map(|_| None).collect() }
    }
}

impl KeyCache {
    /// Append `"k":` to `out`.
    fn write(&mut self, out: &mut Vec<u8>, k: &Bound<'_, PyString>) -> Result<(), NotJson> {
        let p = k.as_ptr() as usize;
        let slot = &mut self.slots[(p >> 4) % KEY_SLOTS];
        if let Some((key, json)) = slot {
            if key.as_ptr() as usize == p {
                out.extend_from_slice(json);
                return Ok(());
            }
        }
        let s = k.to_str().map_err(|_| NotJson("is not UTF-8".into()))?;
        let mut json = Vec::with_capacity(s.len() + 3);
        string(&mut json, s);
        json.push(b':');
        out.extend_from_slice(&json);
        *slot = Some((k.clone().unbind(), json));
        Ok(())
    }
}

/// Ask the CPU for every top-level value of event `ev` (a dict) before the event is read: an
/// event a caller made long before (a replay's, a benchmark's list) is cold, and lowering it
/// and writing its JSON then wait for one cache miss after another, value after value; asked
/// for together, the misses overlap. Only a hint: nothing is read here but the dict's table.
pub fn prefetch_values(ev: &Bound<'_, PyAny>) {
    let Ok(d) = ev.downcast::<PyDict>() else { return };
    let mut pos: ffi::Py_ssize_t = 0;
    let mut k: *mut ffi::PyObject = std::ptr::null_mut();
    let mut v: *mut ffi::PyObject = std::ptr::null_mut();
    // SAFETY: `d` is a live dict and the GIL is held; PyDict_Next hands out borrowed
    // pointers, which are only prefetched (a prefetch never faults and changes nothing).
    unsafe {
        while ffi::PyDict_Next(d.as_ptr(), &mut pos, &mut k, &mut v) != 0 {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = v as *const i8;
                _mm_prefetch::<{ _MM_HINT_T0 }>(p);
                // A string's characters follow its header (48 bytes for compact ASCII).
                _mm_prefetch::<{ _MM_HINT_T0 }>(p.wrapping_add(64));
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = v;
        }
    }
}

/// `[ts, event]` for a top-level event mapping; an error names the offending field. Returns
/// whether a non-finite float was written as null (the event read back differs from `ev`).
pub fn event(out: &mut Vec<u8>, ts: i64, ev: &Bound<'_, PyAny>, keys: &mut KeyCache)
             -> Result<bool, (String, NotJson)> {
    let mut nulled = false;
    out.clear();
    out.push(b'[');
    int(out, ts);
    out.push(b',');
    if let Ok(d) = ev.downcast::<PyDict>() {
        out.push(b'{');
        for (i, (k, x)) in d.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let name = || k.str().map(|s| s.to_string()).unwrap_or_default();
            let Ok(ks) = k.downcast::<PyString>() else {
                return Err((name(), NotJson("is not a string key".into())));
            };
            keys.write(out, ks).map_err(|e| (name(), e))?;
            write(out, &x, 1, &mut nulled).map_err(|e| (name(), e))?;
        }
        out.push(b'}');
    } else {
        write(out, ev, 0, &mut nulled).map_err(|e| (String::new(), e))?;
    }
    out.push(b']');
    Ok(nulled)
}
