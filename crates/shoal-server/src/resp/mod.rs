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
pub(crate) mod db;
pub(crate) mod forward;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod glob;
mod long_double;
mod multi;
mod reply;
pub(crate) mod routing;
mod session;
pub(crate) mod stats;
pub(crate) mod xstream;

use crate::admin::clients::ClientSlot;
use crate::connection::{self, Fatal, Protocol, Step};
use crate::context::ServerStats;
use crate::context::{Durability, ServerContext};
use crate::listener::{Connection, FrontEnd};
use crate::stream::ClientStream;
use crate::workers::{Placement, Served};
use bytes::BytesMut;
use frame::{Args, Limits};
use reply::{ErrorReply, Reply};
use session::Session;
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
        connection::serve::<Resp, S>(stream, conn, placement)
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

/// The Redis protocol over one connection: framing (`frame`) and the
/// client's [`Session`].
struct Resp {
    session: Session,
    limits: Limits,
    /// Reused for each request: its arguments' spans, and the words of an
    /// inline command.
    spans: Vec<(usize, usize)>,
    inline: Vec<u8>,
}

impl Protocol for Resp {
    const NAME: &'static str = "resp";

    fn new(ctx: Arc<ServerContext>, conn: &Connection) -> Resp {
        let store = ctx.store.config();
        let limits = Limits::new(ctx.config.max_request_size.0 as usize, store.max_value_bytes, store.max_key_bytes);
        let slot = ClientSlot::new(conn.id, conn.peer, conn.local, conn.fd);
        Resp { session: Session::with_slot(ctx, slot), limits, spans: Vec::new(), inline: Vec::new() }
    }

    fn client_slot(&self) -> Option<Arc<ClientSlot>> {
        Some(self.session.slot.clone())
    }

    fn step(&mut self, input: &[u8], out: &mut BytesMut) -> Result<Option<(usize, Step)>, Fatal> {
        let fatal = |e: frame::FrameError, proto| {
            let mut reply = BytesMut::new();
            Reply::new(&mut reply, proto).error(&ErrorReply::owned(e.to_string()));
            Fatal { reply: reply.to_vec(), reason: e.to_string() }
        };
        let n = match frame::check(input, &self.limits) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(None),
            Err(e) => return Err(fatal(e, self.session.proto)),
        };
        let data =
            frame::parse(&input[..n], &mut self.spans, &mut self.inline).map_err(|e| fatal(e, self.session.proto))?;
        let args = Args::new(data, &self.spans);
        if args.is_empty() {
            return Ok(Some((n, Step::Done)));
        }
        match self.session.execute(args, out) {
            Step::Retry => Ok(Some((0, Step::Retry))),
            Step::Wait(until) => Ok(Some((0, Step::Wait(until)))),
            step => Ok(Some((n, step))),
        }
    }

    fn forwarded(&mut self, reply: BytesMut) -> BytesMut {
        self.session.forwarded(reply)
    }

    fn quit(&self) -> bool {
        self.session.quit
    }

    fn take_touched(&mut self) -> Option<Durability> {
        let need = std::mem::take(&mut self.session.durable);
        std::mem::take(&mut self.session.touched).then_some(need)
    }

    fn held_bytes(&self) -> usize {
        self.session.transaction_bytes()
    }

    fn trim(&mut self, keep: usize) {
        if self.inline.capacity() > keep {
            self.inline = Vec::new();
        }
    }
}
