//! Answers to malformed HTTP, worded as the node's uvicorn words them.
//!
//! hyper answers a request head it cannot parse itself, with a bare status and no body
//! (`400`, `414`, `431`, `content-length: 0`), before any service sees the request. uvicorn
//! (httptools) answers every unparsable request `400` with the text `Invalid HTTP request
//! received.` and closes the connection. `Guarded` wraps a connection's socket and puts that
//! answer in place of hyper's bare one as it is written; `bad_request` is the same answer for
//! what hyper finds wrong later, in a body (a broken chunk). hyper writes its bare answer
//! only as the last thing on a connection it then closes, and every answer of this server
//! carries a content type, so the exact bytes of a bare answer at the end of a write can only
//! be hyper's.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::header::{HeaderValue, CONNECTION};
use hyper::{Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::{text, Body};

/// uvicorn's text for a request it cannot parse.
pub const INVALID: &str = "Invalid HTTP request received.";

/// The status lines of hyper's bare answers (its `Server::on_error`), each followed by
/// `connection: close` (HTTP/1.1) or not (HTTP/1.0) and `content-length: 0`, no Date header
/// (the front sends none), and the status line of what each becomes. A target over 64 KiB is
/// hyper's 414 and httptools' 400 (its URL offsets are 16 bits): uvicorn's 400 it is. uvicorn
/// has no bound on the header count, so past hyper's (100, or a head too large to buffer) the
/// status stays hyper's 431, with a message saying which bound.
const BARE: [(&[u8], &[u8]); 6] = [
    (b"HTTP/1.1 400 Bad Request\r\n", b"HTTP/1.1 400 Bad Request\r\n"),
    (b"HTTP/1.0 400 Bad Request\r\n", b"HTTP/1.1 400 Bad Request\r\n"),
    (b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
     b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
    (b"HTTP/1.0 431 Request Header Fields Too Large\r\n",
     b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
    (b"HTTP/1.1 414 URI Too Long\r\n", b"HTTP/1.1 400 Bad Request\r\n"),
    (b"HTTP/1.0 414 URI Too Long\r\n", b"HTTP/1.1 400 Bad Request\r\n"),
];
const BARE_END: &[u8] = b"content-length: 0\r\n\r\n";
const BARE_CLOSE: &[u8] = b"connection: close\r\n";

fn message_of(status_line: &[u8]) -> &'static str {
    match &status_line[9..12] {
        b"431" => "Request header fields too large: more than 100 headers, or a head too \
                   large to buffer.",
        _ => INVALID,
    }
}

/// The answer that replaces a bare one: uvicorn's `send_400_response` layout.
fn replacement(status_line: &[u8]) -> Bytes {
    let message = message_of(status_line);
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(status_line);
    out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\ncontent-length: ");
    out.extend_from_slice(message.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
    out.extend_from_slice(message.as_bytes());
    Bytes::from(out)
}

/// Where a bare answer starts in `buf` (it ends `buf`) and the status line of what replaces
/// it.
fn bare_answer(buf: &[u8]) -> Option<(usize, &'static [u8])> {
    let head = buf.strip_suffix(BARE_END)?; // the common case ends here, on the last bytes
    let head = head.strip_suffix(BARE_CLOSE).unwrap_or(head);
    BARE.iter().find(|(line, _)| head.ends_with(line))
        .map(|(line, into)| (head.len() - line.len(), *into))
}

/// The answer to a request whose body hyper could not decode (uvicorn's, connection closed).
pub fn bad_request() -> Response<Body> {
    let mut resp = text(StatusCode::BAD_REQUEST, INVALID);
    resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A connection's socket whose writes have hyper's bare answers replaced (see the module).
/// Reports itself unvectored, so hyper hands it each answer in one flat buffer.
pub struct Guarded<T> {
    io: T,
    /// A replacement being written, and how much of it went.
    pending: Option<(Bytes, usize)>,
}

impl<T> Guarded<T> {
    pub fn new(io: T) -> Self {
        Guarded { io, pending: None }
    }
}

impl<T: AsyncWrite + Unpin> Guarded<T> {
    /// Write what is left of a replacement; Ready once it all went.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, sent)) = &mut self.pending {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
            if *sent == bytes.len() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>)
                 -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8])
                  -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        match bare_answer(buf) {
            None => Pin::new(&mut this.io).poll_write(cx, buf),
            // what comes before it first (a previous answer still in the buffer)
            Some((start, _)) if start > 0 => Pin::new(&mut this.io).poll_write(cx, &buf[..start]),
            Some((_, line)) => {
                // The bare answer counts as written; its replacement goes out now or on the
                // flush and shutdown hyper does next.
                this.pending = Some((replacement(line), 0));
                let _ = this.drain(cx)?;
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}
