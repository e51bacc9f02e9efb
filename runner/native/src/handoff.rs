//! The hand-off between the runtime and Python. Requests of the hot route wait in one queue
//! that a single Python thread drains in batches (one wakeup and one GIL acquisition per
//! batch, not per request); each carries a `Reply` that any Python thread answers once, with
//! an answer or "forward it" (a cheap call: the answer is queued for the runtime and the call
//! returns).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH,
                    TRANSFER_ENCODING};
use hyper::StatusCode;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use tokio::sync::oneshot;

/// An answer made in Python: status, headers (framing ones left out: the server frames the
/// body it is given) and body.
#[derive(Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// From Python values: `headers` an iterable of `(bytes, bytes)` pairs.
    pub fn from_py<'py>(status: u16, headers: &Bound<'py, PyAny>, body: &[u8]) -> PyResult<Self> {
        let status = StatusCode::from_u16(status)
            .map_err(|_| PyValueError::new_err(format!("not an HTTP status: {status}")))?;
        let mut map = HeaderMap::with_capacity(4);
        for item in headers.try_iter()? {
            let (name, value): (Bound<'py, PyBytes>, Bound<'py, PyBytes>) = item?.extract()?;
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| PyValueError::new_err(format!("header name: {e}")))?;
            if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
                continue;
            }
            let value = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|e| PyValueError::new_err(format!("header {name}: {e}")))?;
            map.append(name, value);
        }
        Ok(Answer { status, headers: map, body: Bytes::copy_from_slice(body) })
    }
}

/// A header value as Python's ASGI servers give it: its bytes as Latin-1 text.
pub fn latin1<'py>(py: Python<'py>, value: &HeaderValue) -> Bound<'py, PyString> {
    let bytes = value.as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) if s.is_ascii() => PyString::new(py, s),
        _ => PyString::new(py, &bytes.iter().map(|&b| b as char).collect::<String>()),
    }
}

/// What Python decided for a request.
pub enum Outcome {
    Answer(Answer),
    /// Forward the request as it came to the application's own server.
    Forward,
}

/// A hot request on its way to Python: what the hot path reads of it, and where its outcome
/// goes.
pub struct Pending {
    /// The target's query (the hot path reads `deadline_ms` there), if it has one.
    pub query: Option<Bytes>,
    pub authorization: Option<HeaderValue>,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
    pub tx: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct State {
    items: VecDeque<Pending>,
    waiting: bool, // the Python thread sleeps on `ready`: the next push wakes it
    closed: bool,
}

#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a request; false (the request dropped) once the queue is closed. Only the push
    /// that finds the Python thread asleep wakes it: requests arriving meanwhile ride in its
    /// batch.
    pub fn push(&self, pending: Pending) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        st.items.push_back(pending);
        let wake = std::mem::take(&mut st.waiting);
        drop(st);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// Up to `max` requests, waiting up to `timeout` for the first; None once closed and
    /// empty.
    pub fn take(&self, max: usize, timeout: Duration) -> Option<Vec<Pending>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.items.is_empty() && !st.closed {
            let now = Instant::now();
            if now >= deadline {
                st.waiting = false;
                return Some(Vec::new());
            }
            st.waiting = true;
            st = self.ready.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
        st.waiting = false;
        if st.items.is_empty() {
            return None;
        }
        let n = st.items.len().min(max.max(1));
        Some(st.items.drain(..n).collect())
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

/// One request's way back, answered once from any Python thread. Dropped unanswered, the
/// request is answered 500 (a bug on the Python side, never a client's doing).
#[pyclass(frozen, module = "railflow_http_native")]
pub struct Reply {
    tx: Mutex<Option<oneshot::Sender<Outcome>>>,
}

impl Reply {
    pub fn new(tx: oneshot::Sender<Outcome>) -> Self {
        Reply { tx: Mutex::new(Some(tx)) }
    }

    fn take(&self) -> Option<oneshot::Sender<Outcome>> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[pymethods]
impl Reply {
    /// Answer with `status`, `headers` (`(bytes, bytes)` pairs; content-length,
    /// transfer-encoding and connection are the server's) and `body`. False when already
    /// answered or the client went away; raises ValueError (unanswered) for a bad status or
    /// header.
    fn respond(&self, status: u16, headers: &Bound<'_, PyAny>, body: &[u8]) -> PyResult<bool> {
        let answer = Answer::from_py(status, headers, body)?;
        Ok(match self.take() {
            Some(tx) => tx.send(Outcome::Answer(answer)).is_ok(),
            None => false,
        })
    }

    /// Forward the request, as it came, to the application's own server. False when already
    /// answered or the client went away.
    fn forward(&self) -> bool {
        match self.take() {
            Some(tx) => tx.send(Outcome::Forward).is_ok(),
            None => false,
        }
    }

    /// Whether `respond` or `forward` was called.
    #[getter]
    fn answered(&self) -> bool {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}
