//! The public listener: HTTP/1.1 by hyper on the front's runtime. `POST <hot path>` is read
//! whole (bounded: past the limit, the 413 Python rendered at start) and handed to Python with
//! its query; the answer Python gives is written as it is. Every other request, and whatever
//! Python declines, goes to the application's own server (`upstream.rs`). A connection idle
//! after an answer is closed after the keep-alive time, as uvicorn closes it; malformed HTTP
//! is answered as uvicorn answers it (`malformed.rs`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::handoff::{latin1, Answer, Outcome, Pending, Queue, Reply};
use crate::malformed::{self, Guarded};
use crate::upstream::Upstream;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub struct Shared {
    /// Called per hot request on the runtime's thread, `handler(reply, query, authorization,
    /// content_type, body)`; None: requests go through `queue` to a Python thread instead.
    pub handler: Option<Py<PyAny>>,
    pub queue: Queue,
    pub upstream: Arc<Upstream>,
    pub hot_path: String,
    pub body_max: usize,
    pub too_large: Answer,
    /// How long a connection may wait for a request's head: after an answer (uvicorn's
    /// `timeout_keep_alive`, whose timer starts there too), and from its opening.
    pub keep_alive: Duration,
    /// Hot requests between their headers and their answer (`Front.close` waits for them).
    pub in_flight: AtomicUsize,
}

pub fn full(body: Bytes) -> Body {
    Full::new(body).map_err(|never| match never {}).boxed_unsync()
}

pub fn text(status: StatusCode, message: &'static str) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::from_static(message.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

fn answered(answer: Answer) -> Response<Body> {
    let mut resp = Response::new(full(answer.body));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    resp
}

/// Accept connections until the task is aborted (`Front.close`).
pub async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was taken: wait a
                // little rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            // No Date header: the node's uvicorn sends none either (answers stay alike).
            // hyper's head timer starts once an answer is written and the connection waits
            // for the next head: an idle connection closes then, as uvicorn's keep-alive.
            builder.timer(TokioTimer::new()).header_read_timeout(shared.keep_alive)
                .auto_date_header(false);
            let service = service_fn(move |req| handle(shared.clone(), peer, req));
            let io = TokioIo::new(Guarded::new(stream));
            let _ = builder.serve_connection(io, service).await;
        });
    }
}

async fn handle(shared: Arc<Shared>, peer: SocketAddr, req: Request<Incoming>)
                -> Result<Response<Body>, BoxError> {
    if req.method() == Method::POST && req.uri().path() == shared.hot_path {
        return hot(&shared, peer, req).await;
    }
    let req = req.map(|b| b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync());
    Ok(shared.upstream.forward(req, peer).await)
}

struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn hot(shared: &Arc<Shared>, peer: SocketAddr, req: Request<Incoming>)
             -> Result<Response<Body>, BoxError> {
    let _counted = InFlight::new(&shared.in_flight);
    let (parts, body) = req.into_parts();
    let declared = parts.headers.get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > shared.body_max as u64) {
        return Ok(answered(shared.too_large.clone())); // refused unread, as HotPath does
    }
    let body = match Limited::new(body, shared.body_max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(answered(shared.too_large.clone()));
        }
        // A broken chunk, or the client went away mid-body (then the answer goes nowhere).
        Err(_) => return Ok(malformed::bad_request()),
    };
    let (tx, rx) = oneshot::channel();
    let pending = Pending {
        query: parts.uri.query().map(|q| Bytes::copy_from_slice(q.as_bytes())),
        authorization: parts.headers.get(AUTHORIZATION).cloned(),
        content_type: parts.headers.get(CONTENT_TYPE).cloned(),
        body: body.clone(),
        tx,
    };
    let outcome = match &shared.handler {
        Some(handler) => {
            call_python(handler, pending);
            rx.await.ok()
        }
        None if shared.queue.push(pending) => rx.await.ok(),
        None => Some(Outcome::Forward), // closing: the application's server answers
    };
    Ok(match outcome {
        Some(Outcome::Answer(answer)) => answered(answer),
        Some(Outcome::Forward) => {
            let req = Request::from_parts(parts, full(body));
            shared.upstream.forward(req, peer).await
        }
        None => text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
    })
}

thread_local! {
    static PYTHON_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Hand one request to Python on this thread (the GIL taken for the call alone). The thread
/// keeps a Python thread state from its first call on, so each later call only takes and
/// releases the GIL. A failure of the handler is printed; the reply it dropped answers 500.
fn call_python(handler: &Py<PyAny>, p: Pending) {
    PYTHON_THREAD.with(|registered| {
        if !registered.get() {
            // SAFETY: the interpreter runs (this module was imported) and this thread holds
            // no GIL: take a thread state and the GIL, then release the GIL and keep the
            // state (its count stays 1, so later `with_gil` calls neither make nor drop it).
            unsafe {
                pyo3::ffi::PyGILState_Ensure();
                pyo3::ffi::PyEval_SaveThread();
            }
            registered.set(true);
        }
    });
    Python::with_gil(|py| {
        let auth = p.authorization.as_ref().map(|v| latin1(py, v));
        let ctype = p.content_type.as_ref().map(|v| latin1(py, v));
        let called = Py::new(py, Reply::new(p.tx)).and_then(|reply| {
            let query = p.query.as_ref().map(|q| PyBytes::new(py, q));
            handler.call1(py, (reply, query, auth, ctype, PyBytes::new(py, &p.body)))
        });
        if let Err(e) = called {
            e.print(py);
        }
    });
}
