//! Forwarding to the application's own server (the node's uvicorn on a Unix socket that only
//! this user can reach): every route but the hot one, and whatever Python declined. A request
//! goes as it came, less its hop-by-hop headers, with the client's address in
//! `x-forwarded-for` (the application trusts it from this socket alone); the answer comes
//! back streamed. Connections are kept in a small pool and reused once an answer was read
//! to its end. A client's body that hyper cannot decode (a broken chunk) is answered as
//! uvicorn answers it, not as an unreachable application.

use std::error::Error as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use crate::malformed;
use crate::server::{text, Body, BoxError};

const IDLE_MAX: usize = 32; // idle connections kept
const IDLE_FOR: Duration = Duration::from_secs(60); // the application keeps them longer

// Hop-by-hop (RFC 9110 7.6.1), and what the client must not decide for the application:
// the forwarded address and scheme are this server's to state.
const REQUEST_DROPPED: [&str; 11] = [
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "expect", "x-forwarded-for", "x-forwarded-proto", "forwarded",
];
const RESPONSE_DROPPED: [&str; 5] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

pub struct Upstream {
    path: PathBuf,
    idle: Mutex<Vec<(SendRequest<Body>, Instant)>>,
}

impl Upstream {
    pub fn new(path: PathBuf) -> Self {
        Upstream { path, idle: Mutex::new(Vec::new()) }
    }

    async fn connection(&self) -> Result<SendRequest<Body>, BoxError> {
        loop {
            let popped = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some((mut sender, since)) = popped else { break };
            if since.elapsed() > IDLE_FOR || sender.is_closed() {
                continue;
            }
            if sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        let stream = UnixStream::connect(&self.path).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await; // ends when the sender is dropped or the server closes it
        });
        Ok(sender)
    }

    fn put_back(&self, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_MAX {
            idle.push((sender, Instant::now()));
        }
    }

    /// The application's answer to `req` from the client at `peer`; 502 if it cannot be
    /// reached (starting or stopping).
    pub async fn forward(self: &Arc<Self>, mut req: Request<Body>, peer: SocketAddr)
                         -> Response<Body> {
        prepare(&mut req, peer);
        let mut sender = match self.connection().await {
            Ok(s) => s,
            Err(_) => return unavailable(),
        };
        let resp = match sender.send_request(req).await {
            Ok(r) => r,
            // the client's body failed (hyper's error within ours), not the application
            Err(e) if e.is_user() && e.source()
                .is_some_and(|cause| cause.downcast_ref::<hyper::Error>().is_some()) => {
                return malformed::bad_request();
            }
            Err(_) => return unavailable(),
        };
        let (mut parts, body) = resp.into_parts();
        // The application closes after what it could not parse (and when it stops): so does
        // this client's connection, as it would have under the application alone.
        let closes = parts.headers.get(CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        drop_headers(&mut parts.headers, &RESPONSE_DROPPED);
        if closes {
            parts.headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        let body = if body.is_end_stream() {
            self.put_back(sender);
            PooledBody { inner: body, back: None }
        } else {
            PooledBody { inner: body, back: Some((sender, self.clone())) }
        };
        Response::from_parts(parts, body.boxed_unsync())
    }
}

fn prepare(req: &mut Request<Body>, peer: SocketAddr) {
    let headers = req.headers_mut();
    drop_headers(headers, &REQUEST_DROPPED);
    if let Ok(value) = HeaderValue::from_str(&peer.ip().to_string()) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), value);
    }
    *req.version_mut() = Version::HTTP_11;
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        // An absolute-form target: the application gets the origin form.
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
        *req.uri_mut() = target.parse().unwrap_or_else(|_| Uri::from_static("/"));
    }
}

fn drop_headers(headers: &mut HeaderMap, names: &[&str]) {
    for name in names {
        headers.remove(*name);
    }
}

fn unavailable() -> Response<Body> {
    let mut resp = text(StatusCode::BAD_GATEWAY, "the node's application server is not reachable");
    resp.headers_mut().insert("retry-after", HeaderValue::from_static("1"));
    resp
}

/// An answer's body that hands its connection back to the pool once read to its end.
struct PooledBody {
    inner: Incoming,
    back: Option<(SendRequest<Body>, Arc<Upstream>)>,
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>)
                  -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                if let Some((sender, pool)) = this.back.take() {
                    pool.put_back(sender);
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
