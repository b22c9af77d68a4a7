//! The Redis protocol front end (RESP2, and RESP3 after `HELLO 3`), so that
//! redis-cli, redis-benchmark and Redis client libraries work against Shoal.
//!
//! Layers, each seeing only the one below: `frame` (bytes to requests, two
//! passes, bounded), `connection` (one client's read-execute-write loop and
//! its limits), `session` (per-client state and dispatch), `cmd` (one file
//! per command: parse, apply, reply), `db` (a Redis database over the
//! store's public operations), `reply` (RESP2/RESP3 encoding), `glob`.
//! In a cluster, `routing` decides where each command runs and `forward`
//! runs it on other servers, over pooled RESP connections.
//! Supported commands and options are listed in `docs/resp.md`.

mod cmd;
mod connection;
mod db;
mod forward;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod glob;
mod multi;
mod reply;
mod routing;
mod session;
pub(crate) mod stats;

use crate::context::ServerContext;
use crate::context::ServerStats;
use crate::listener::{Connection, FrontEnd};
use crate::stream::ClientStream;
use crate::workers::{Placement, Served};
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::debug;

/// The RESP listener's front end.
pub struct RespFrontEnd;

impl RespFrontEnd {
    pub fn new(_ctx: &Arc<ServerContext>) -> RespFrontEnd {
        RespFrontEnd
    }
}

impl FrontEnd for RespFrontEnd {
    fn name(&self) -> &'static str {
        "resp"
    }

    fn refusal(&self) -> &'static [u8] {
        b"-ERR max number of clients reached\r\n"
    }

    fn serve<S: ClientStream>(self: Arc<Self>, stream: S, conn: Connection, placement: Placement) -> Served {
        connection::serve(stream, conn, placement)
    }

    fn serve_plain_on_tls(self: Arc<Self>, stream: TcpStream, conn: Connection, _: Placement) -> Served {
        Box::pin(async move {
            ServerStats::add(&conn.ctx.stats.tls_handshake_failures, 1);
            debug!("resp connection {} from {}: not TLS on a TLS port: refused", conn.id, conn.peer);
            let _ = stream.try_write(b"-ERR this port speaks TLS only (redis-cli: --tls)\r\n");
            linger(stream).await;
            None
        })
    }
}

/// Closes `stream` once its client closed too, reading and dropping what it
/// sends meanwhile (at most 64 KiB, for at most a second): closing with
/// unread bytes would reset the connection, and the client could lose the
/// reply sent before.
async fn linger(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut left = 64usize << 10;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}
