//! A bounded HTTP/1.1 listener for a small axum `Router`: every server's
//! `/metrics`, and the coordinator's `/metrics` and dashboard.
//!
//! Bounds, so that whoever reaches the port cannot make the process
//! allocate without limit or keep resources forever:
//! * at most [`Limits::max_connections`] connections at once; one more is
//!   closed as soon as it is accepted;
//! * a request's head (request line and headers) may take at most
//!   [`Limits::max_head_bytes`] and [`Limits::max_headers`] header fields
//!   (hyper answers 431 or closes past them) and must arrive within
//!   [`Limits::head_timeout`] (also the longest a kept-alive connection
//!   sits idle);
//! * only GET and HEAD are served: any other method gets 405 (with
//!   `Allow: GET, HEAD`); a request that announces a body gets 413; the
//!   body is never read and both close the connection;
//! * a connection lives at most [`Limits::connection_lifetime`], idle or
//!   not (a scraper or a browser simply reconnects).
//!
//! Every answer is marked not to be cached (`Cache-Control: no-store`),
//! not to be sniffed (`X-Content-Type-Options: nosniff`), and to load
//! nothing from elsewhere (`Content-Security-Policy: default-src 'self'`).
//! Handlers take no input but the path and the query string, parsed by
//! axum (a bad one is a 400, never a panic).
//!
//! Shutdown: when the signal turns true the listener stops accepting and
//! drops its open connections (nothing they do changes any state).

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// The bounds of a listener (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// At least 8 KiB (hyper's minimum read buffer).
    pub max_head_bytes: usize,
    /// Header fields of a request.
    pub max_headers: usize,
    pub head_timeout: Duration,
    pub connection_lifetime: Duration,
}

impl Default for Limits {
    /// 64 connections (a browser opens several, scrapers one each), 16 KiB
    /// and 64 fields of headers within 10 s, connections of at most 2 min.
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_head_bytes: 16 << 10,
            max_headers: 64,
            head_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(120),
        }
    }
}

/// hyper's smallest allowed read buffer.
const MIN_BUF: usize = 8192;

/// Binds `addr` (port 0 picks a free port), ready for [`serve`]. A std
/// listener, so that it can be bound before a runtime runs it.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `router` on `listener` within `limits` until `shutdown` turns
/// true. Must run inside a tokio runtime with timers and I/O enabled.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, mut shutdown: watch::Receiver<bool>) {
    let router = router.layer(middleware::from_fn(guard));
    let service = TowerToHyperService::new(router);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(limits.max_head_bytes.max(MIN_BUF))
        .max_header_size(limits.max_head_bytes)
        .max_headers(limits.max_headers.max(1));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        debug!("http: refusing a connection from {peer}: {} are open", limits.max_connections);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let conn = builder.serve_connection(TokioIo::new(stream), service.clone());
                    let lifetime = limits.connection_lifetime;
                    connections.spawn(async move {
                        match tokio::time::timeout(lifetime, conn).await {
                            Ok(Err(e)) => debug!("http: connection from {peer}: {e}"),
                            Ok(Ok(())) => {}
                            Err(_) => debug!("http: connection from {peer} closed after {lifetime:?}"),
                        }
                        drop(permit);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: let some close.
                    warn!("http: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    connections.shutdown().await;
}

/// Completes when shutdown is asked (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Refuses what no route takes before any handler runs (other methods:
/// 405; request bodies: 413; the connection is closed rather than the body
/// read), and marks every answer as not to be cached, sniffed, or made to
/// load anything from elsewhere.
async fn guard(request: Request<Body>, next: Next) -> Response {
    let refused = if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = (StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD are served\n").into_response();
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        Some(response)
    } else if announces_body(&request) {
        Some((StatusCode::PAYLOAD_TOO_LARGE, "request bodies are not accepted\n").into_response())
    } else {
        None
    };
    let mut response = match refused {
        Some(mut response) => {
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
        None => next.run(request).await,
    };
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'self'"));
    response
}

/// Whether `request` says a body follows (a non-zero length or chunks).
fn announces_body(request: &Request<Body>) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::io::{Read, Write};

    /// A listener serving "ok" on `/` on a free port, on its own runtime.
    fn start(limits: Limits) -> (SocketAddr, watch::Sender<bool>, std::thread::JoinHandle<()>) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                serve(listener, Router::new().route("/", get(|| async { "ok" })), limits, rx).await
            });
        });
        (addr, tx, thread)
    }

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(request);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    #[test]
    fn gets_and_heads_are_served_with_the_guard_headers() {
        let (addr, stop, thread) = start(Limits::default());
        let ok = exchange(addr, GET);
        assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "{ok}");
        let lower = ok.to_ascii_lowercase();
        assert!(lower.contains("cache-control: no-store"), "{ok}");
        assert!(lower.contains("x-content-type-options: nosniff"), "{ok}");
        assert!(lower.contains("content-security-policy: default-src 'self'"), "{ok}");
        let head = exchange(addr, b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200") && !head.ends_with("ok"), "{head}");
        let missing = exchange(addr, b"GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        stop.send_replace(true);
        thread.join().unwrap();
    }

    #[test]
    fn bodies_and_other_methods_are_refused() {
        let (addr, stop, thread) = start(Limits::default());
        let post = exchange(addr, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.to_ascii_lowercase().contains("allow: get, head"), "{post}");
        let delete = exchange(addr, b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(delete.starts_with("HTTP/1.1 405"), "{delete}");
        let body = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
        assert!(body.starts_with("HTTP/1.1 413"), "{body}");
        let chunked = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
        stop.send_replace(true);
        thread.join().unwrap();
    }

    #[test]
    fn oversized_heads_and_garbage_close_the_connection() {
        let (addr, stop, thread) = start(Limits::default());
        // One huge header, many small ones, more fields than allowed.
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 64 << 10));
        big.extend_from_slice(b"\r\n\r\n");
        let refused = exchange(addr, &big);
        assert!(refused.is_empty() || refused.starts_with("HTTP/1.1 431"), "{refused}");
        let mut huge = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..2000 {
            huge.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(40)).as_bytes());
        }
        huge.extend_from_slice(b"\r\n");
        let refused = exchange(addr, &huge);
        assert!(refused.is_empty() || refused.starts_with("HTTP/1.1 431"), "{refused}");
        let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..200 {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let refused = exchange(addr, &many);
        assert!(!refused.starts_with("HTTP/1.1 200"), "{refused}");
        let garbage = exchange(addr, b"\x00\x01\x02 not http at all\r\n\r\n");
        assert!(garbage.is_empty() || garbage.starts_with("HTTP/1.1 400"), "{garbage}");
        // Still serving.
        let ok = exchange(addr, GET);
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        stop.send_replace(true);
        thread.join().unwrap();
    }

    #[test]
    fn connections_beyond_the_cap_are_closed() {
        let limits = Limits::default();
        let (addr, stop, thread) = start(limits);
        let mut held = Vec::new();
        for _ in 0..limits.max_connections {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            // Half a request: the connection stays open, holding a slot.
            s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
            held.push(s);
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(exchange(addr, GET), "");
        drop(held);
        std::thread::sleep(Duration::from_millis(200));
        let ok = exchange(addr, GET);
        assert!(ok.starts_with("HTTP/1.1 200"), "the slots are free again: {ok}");
        stop.send_replace(true);
        thread.join().unwrap();
    }

    #[test]
    fn serve_caps_connections_and_closes_slow_heads() {
        let limits = Limits { max_connections: 1, head_timeout: Duration::from_millis(200), ..Limits::default() };
        let (addr, stop, thread) = start(limits);
        // One connection holds the only slot, sending half a head; the
        // next is closed at once, and the first after the head timeout.
        let mut first = std::net::TcpStream::connect(addr).unwrap();
        first.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "");
        first.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = first.read_to_end(&mut rest);
        let text = String::from_utf8_lossy(&rest);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
        std::thread::sleep(Duration::from_millis(50));
        let ok = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200"), "the slot is free again: {ok}");
        stop.send_replace(true);
        thread.join().unwrap();
    }
}
