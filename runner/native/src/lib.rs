//! `railflow_http_native`: the native HTTP front end of a Railflow node
//! (`runner/api/native.py` drives it).
//!
//! A `Front` listens on the node's public address with hyper on a small tokio runtime of its
//! own threads: parsing, reading bodies and writing answers hold no GIL. `POST <hot path>` is
//! read whole and handed to Python, by a call on the runtime's thread (`handler`) or through
//! a queue that one Python thread drains in batches (`next_batch`); Python answers each
//! through its `Reply` (`respond`, from any thread: the node's apply loop answers an order it
//! applied) or sends it on (`forward`). Every other request is forwarded to the application's
//! own server on a Unix socket. Modules: `handoff` (the queue and `Reply`), `server` (the
//! listener, keep-alive and the hot route), `malformed` (uvicorn's answers to bad HTTP),
//! `upstream` (forwarding).

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

mod handoff;
mod malformed;
mod server;
mod upstream;

use handoff::{latin1, Answer, Queue, Reply};
use server::Shared;

/// The front end. Built listening; `close` stops it.
#[pyclass(frozen, module = "railflow_http_native")]
struct Front {
    shared: Arc<Shared>,
    runtime: Mutex<Option<Runtime>>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
    #[pyo3(get)]
    host: String,
    #[pyo3(get)]
    port: u16,
}

type Batch<'py> = Vec<(Py<Reply>, Option<Bound<'py, PyBytes>>, Option<Bound<'py, PyString>>,
                       Option<Bound<'py, PyString>>, Bound<'py, PyBytes>)>;

#[pymethods]
impl Front {
    /// Listen on `host:port` (0: any free port, see `port`) and forward what is not hot to
    /// the HTTP server on the Unix socket `upstream`. `POST hot_path` bodies past `body_max`
    /// bytes are answered `too_large` (status, headers, body) unread. With a `handler`,
    /// each hot request is handed to `handler(reply, query, authorization, content_type,
    /// body)` on the runtime's thread that read it; without, they wait for `next_batch`. A
    /// connection waiting for a request's head longer than `keep_alive_s` (idle after an
    /// answer, or from its opening) is closed.
    #[new]
    #[pyo3(signature = (host, port, upstream, hot_path, body_max, too_large, threads = 1,
                        handler = None, keep_alive_s = 5.0))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(host: &str, port: u16, upstream: PathBuf, hot_path: String, body_max: usize,
                too_large: (u16, Bound<'py, PyAny>, Bound<'py, PyBytes>), threads: usize,
                handler: Option<Py<PyAny>>, keep_alive_s: f64) -> PyResult<Self> {
        if !(keep_alive_s > 0.0 && keep_alive_s <= 86_400.0) {
            return Err(PyValueError::new_err(format!(
                "keep_alive_s must be within (0, 86400], not {keep_alive_s}")));
        }
        let too_large = Answer::from_py(too_large.0, &too_large.1, too_large.2.as_bytes())?;
        let addr = (host, port).to_socket_addrs()
            .map_err(|e| PyOSError::new_err(format!("{host}:{port}: {e}")))?
            .next().ok_or_else(|| PyValueError::new_err(format!("{host}: no address")))?;
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| PyOSError::new_err(format!("cannot listen on {addr}: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| PyOSError::new_err(e.to_string()))?;
        let port = listener.local_addr().map_err(|e| PyOSError::new_err(e.to_string()))?.port();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("http-native")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("tokio runtime: {e}")))?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(|e| PyOSError::new_err(e.to_string()))?
        };
        let shared = Arc::new(Shared {
            handler,
            queue: Queue::default(),
            upstream: Arc::new(upstream::Upstream::new(upstream)),
            hot_path,
            body_max,
            too_large,
            keep_alive: Duration::from_secs_f64(keep_alive_s),
            in_flight: Default::default(),
        });
        let acceptor = runtime.spawn(server::accept(listener, shared.clone()));
        Ok(Front {
            shared,
            runtime: Mutex::new(Some(runtime)),
            acceptor: Mutex::new(Some(acceptor)),
            host: host.to_owned(),
            port,
        })
    }

    /// The hot requests that came, as `(reply, query, authorization, content_type, body)`
    /// tuples (the query as bytes, header values as Latin-1 text, or None), at most `max`;
    /// waits up to `timeout_s` for the first, the GIL released (an empty list then). None
    /// once closed.
    #[pyo3(signature = (max = 256, timeout_s = 1.0))]
    fn next_batch<'py>(&self, py: Python<'py>, max: usize, timeout_s: f64)
                       -> PyResult<Option<Batch<'py>>> {
        let timeout = Duration::from_secs_f64(timeout_s.clamp(0.0, 3600.0));
        let shared = &self.shared;
        let Some(taken) = py.allow_threads(|| shared.queue.take(max, timeout)) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(taken.len());
        for p in taken {
            let auth = p.authorization.as_ref().map(|v| latin1(py, v));
            let ctype = p.content_type.as_ref().map(|v| latin1(py, v));
            let query = p.query.as_ref().map(|q| PyBytes::new(py, q));
            let body = PyBytes::new(py, &p.body);
            out.push((Py::new(py, Reply::new(p.tx))?, query, auth, ctype, body));
        }
        Ok(Some(out))
    }

    /// Hot requests read and not yet answered.
    #[getter]
    fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Stop listening, wait up to `timeout_s` for the hot requests in flight to be answered
    /// (the Python thread keeps draining meanwhile), then close the queue (`next_batch`
    /// returns None) and stop the runtime (open connections are closed).
    #[pyo3(signature = (timeout_s = 5.0))]
    fn close(&self, py: Python<'_>, timeout_s: f64) {
        if let Some(acceptor) = self.acceptor.lock().unwrap_or_else(|e| e.into_inner()).take() {
            acceptor.abort();
        }
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
        let shared = &self.shared;
        py.allow_threads(|| {
            let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.clamp(0.0, 600.0));
            while shared.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            shared.queue.close();
            if let Some(runtime) = runtime {
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        });
    }
}

impl Drop for Front {
    /// Dropped without `close` (its owner failed): stop the runtime without waiting for its
    /// threads, one of which may wait for the GIL that the dropping thread holds.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            runtime.shutdown_background();
        }
    }
}

#[pymodule]
fn railflow_http_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Front>()?;
    m.add_class::<Reply>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
