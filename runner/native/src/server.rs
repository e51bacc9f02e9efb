//! The public listener: HTTP/1.1 by hyper on the front's runtime. `POST <hot path>` without a
//! query is read whole (bounded: past the limit, the 413 Python rendered at start) and handed
//! to Python through the queue; the answer Python gives is written as it is. Every other
//! request, and whatever Python declines, goes to the application's own server
//! (`upstream.rs`).

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
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::handoff::{Answer, Outcome, Pending, Queue};
use crate::upstream::Upstream;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Shared {
    pub queue: Queue,
    pub upstream: Arc<Upstream>,
    pub hot_path: String,
    pub body_max: usize,
    pub too_large: Answer,
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
            let service = service_fn(move |req| handle(shared.clone(), peer, req));
            let mut builder = http1::Builder::new();
            // No Date header: the node's uvicorn sends none either (answers stay alike).
            builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT)
                .auto_date_header(false);
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn handle(shared: Arc<Shared>, peer: SocketAddr, req: Request<Incoming>)
                -> Result<Response<Body>, BoxError> {
    if req.method() == Method::POST && req.uri().path() == shared.hot_path
        && req.uri().query().is_none() {
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
        Err(e) => return Err(e), // the client went away mid-body: nobody to answer
    };
    let (tx, rx) = oneshot::channel();
    let pending = Pending {
        authorization: parts.headers.get(AUTHORIZATION).cloned(),
        content_type: parts.headers.get(CONTENT_TYPE).cloned(),
        body: body.clone(),
        tx,
    };
    let outcome = match shared.queue.push(pending) {
        Ok(()) => rx.await.ok(),
        Err(_) => Some(Outcome::Forward), // closing: the application's server still answers
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
