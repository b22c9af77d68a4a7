//! The coordinator's HTTP listener (`--metrics-port`): serves a router
//! (the dashboard's routes, `dashboard/`) over HTTP/1.1, bounded so that
//! no client can make it hold much or wait long.
//!
//! Bounds: at most [`MAX_HTTP_CONNECTIONS`] connections (one more is
//! closed at once); request headers of at most [`MAX_HEADER_BYTES`] bytes
//! and [`MAX_HEADERS`] fields, all in within [`HEADER_TIMEOUT`] (also the
//! longest a kept-alive connection may sit idle); a connection lives at
//! most [`CONNECTION_LIFETIME`] (browsers open another). Only GET and HEAD
//! are served and no request body is ever read: a request announcing one
//! gets 413, any other method 405. Handlers take no input but the path
//! and the query string, parsed by axum (a bad one is a 400, never a
//! panic). At shutdown the listener closes and open connections are
//! dropped: nothing they do changes the coordinator's state.

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, warn};

/// Open HTTP connections at once.
pub const MAX_HTTP_CONNECTIONS: usize = 64;
/// Bytes of a request's start line and headers.
pub const MAX_HEADER_BYTES: usize = 16 << 10;
/// Header fields of a request.
pub const MAX_HEADERS: usize = 64;
/// Time a client has to send a request's headers (and the longest an
/// idle kept-alive connection stays open).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection stays open.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// Serves `router` on `listener` until `shutdown` turns true.
pub(crate) fn spawn(listener: TcpListener, router: Router, shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    let router = router.layer(axum::middleware::from_fn(guard));
    tokio::spawn(serve(listener, router, shutdown))
}

async fn serve(listener: TcpListener, router: Router, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(MAX_HTTP_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES.max(8192))
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let _ = stream.set_nodelay(true);
                        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router.clone()));
                        connections.spawn(async move {
                            let _permit = permit;
                            // Past its lifetime the connection is dropped (closed).
                            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                                debug!("HTTP connection from {peer}: {e}");
                            }
                        });
                    }
                    Err(_) => debug!("closing an HTTP connection from {peer}: {MAX_HTTP_CONNECTIONS} are open"),
                },
                Err(e) => {
                    warn!("cannot accept an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    connections.shutdown().await;
}

/// Refuses what no route takes (other methods, request bodies) before any
/// handler runs, and marks every answer as not to be cached or sniffed.
async fn guard(req: Request<Body>, next: Next) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = (StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD are served\n").into_response();
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let announces_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req.headers().get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    if announces_body {
        return (StatusCode::PAYLOAD_TOO_LARGE, "requests may not have a body\n").into_response();
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'self'"));
    resp
}

/// Completes when shutdown is asked (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn server() -> (std::net::SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        spawn(listener, Router::new().route("/", get(|| async { "hello" })), rx);
        (addr, tx)
    }

    /// Sends `request` raw and returns everything the server answered
    /// before it closed (or 2 s passed).
    async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn get_is_served_with_guard_headers() {
        let (addr, _stop) = server().await;
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.contains("hello"));
        assert!(resp.to_ascii_lowercase().contains("cache-control: no-store"), "{resp}");
    }

    #[tokio::test]
    async fn bodies_and_other_methods_are_refused() {
        let (addr, _stop) = server().await;
        let resp = raw(addr, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").await;
        assert!(resp.starts_with("HTTP/1.1 405"), "{resp}");
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").await;
        assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
        let resp = raw(addr, b"GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    }

    #[tokio::test]
    async fn oversized_headers_and_garbage_close_the_connection() {
        let (addr, _stop) = server().await;
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 64 << 10));
        big.extend_from_slice(b"\r\n\r\n");
        let resp = raw(addr, &big).await;
        assert!(resp.is_empty() || resp.starts_with("HTTP/1.1 431"), "{resp}");
        let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..200 {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let resp = raw(addr, &many).await;
        assert!(!resp.starts_with("HTTP/1.1 200"), "{resp}");
        let resp = raw(addr, b"\x00\x01\x02 garbage\r\n\r\n").await;
        assert!(!resp.starts_with("HTTP/1.1 200"), "{resp}");
        // Still serving.
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed() {
        let (addr, _stop) = server().await;
        let mut held = Vec::new();
        for _ in 0..MAX_HTTP_CONNECTIONS {
            let mut s = TcpStream::connect(addr).await.unwrap();
            // Half a request: the connection stays open, holding a permit.
            s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(resp.is_empty(), "{resp}");
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let resp = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }
}
