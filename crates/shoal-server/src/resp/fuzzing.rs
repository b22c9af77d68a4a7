//! Not an API: the entry point of the `resp_command` fuzz target
//! (`fuzz/`, `docs/fuzzing.md`). A standalone store and one session, fed
//! raw request bytes exactly as a connection feeds them: `frame::check`,
//! `frame::parse`, then the command table's parsers and commands.

use crate::config::{ByteSize, ServerConfig};
use crate::context::ServerContext;
use crate::resp::frame::{self, Args, Limits};
use crate::resp::reply::{ErrorReply, Reply};
use crate::resp::session::{Session, Step};
use bytes::BytesMut;
use std::sync::Arc;

/// What [`Harness::run`] did with its input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Non-empty requests executed: each appended exactly one reply.
    pub commands: usize,
    /// The input ended in a protocol error (its error reply is the last one).
    pub protocol_error: bool,
    /// A command (QUIT) ended the connection.
    pub quit: bool,
}

/// A standalone server's context and one client session on it.
pub struct Harness {
    config: ServerConfig,
    /// The store of the last run and how many runs it served, kept while
    /// it holds no object (a new store costs milliseconds: its memory).
    ctx: Option<(Arc<ServerContext>, u32)>,
    spans: Vec<(usize, usize)>,
    inline: Vec<u8>,
    /// The replies of the last [`Harness::run`].
    pub replies: BytesMut,
}

impl Harness {
    /// Stores of 32 MiB (about the least that 8 MiB segments allow), with
    /// small values (32 KiB) and requests (64 KiB) so that inputs reach
    /// every limit.
    pub fn new() -> Harness {
        let config = ServerConfig {
            memory: ByteSize(32 << 20),
            max_value_size: ByteSize(32 << 10),
            max_request_size: ByteSize(64 << 10),
            ..Default::default()
        };
        config.validate().expect("a valid configuration");
        Harness { config, ctx: None, spans: Vec::new(), inline: Vec::new(), replies: BytesMut::new() }
    }

    /// Runs every complete request at the start of `input` as a connection
    /// does, on a new session over a store that holds no object (a new one
    /// after a run that left objects, and every 1,000 runs); replies go to
    /// [`Harness::replies`].
    pub fn run(&mut self, input: &[u8]) -> Outcome {
        let empty =
            |ctx: &ServerContext| ctx.tables.list().iter().all(|(_, t)| ctx.tables.len(*t).is_ok_and(|n| n == 0));
        let ctx = match self.ctx.take() {
            Some((ctx, runs)) if runs < 1000 && empty(&ctx) => {
                self.ctx = Some((ctx.clone(), runs + 1));
                ctx
            }
            _ => {
                let ctx = Arc::new(ServerContext::new(self.config.clone()).expect("a valid configuration"));
                self.ctx = Some((ctx.clone(), 1));
                ctx
            }
        };
        let store = ctx.store.config();
        let limits = Limits::new(ctx.config.max_request_size.0 as usize, store.max_value_bytes, store.max_key_bytes);
        let mut session = Session::new(ctx, 1);
        self.replies.clear();
        let mut outcome = Outcome::default();
        let mut input = input;
        loop {
            let n = match frame::check(input, &limits) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    outcome.protocol_error = true;
                    Reply::new(&mut self.replies, session.proto).error(&ErrorReply::owned(e.to_string()));
                    break;
                }
            };
            match frame::parse(&input[..n], &mut self.spans, &mut self.inline) {
                Ok(data) => {
                    let args = Args::new(data, &self.spans);
                    if !args.is_empty() {
                        match session.execute(args, &mut self.replies) {
                            Step::Done => outcome.commands += 1,
                            // A blocked XREAD is dropped, as by a client that goes away.
                            Step::Wait(_) => {
                                session.blocked_read = None;
                                outcome.commands += 1;
                            }
                            Step::Forward(_) | Step::Retry => unreachable!("a standalone server forwards nothing"),
                        }
                    }
                }
                Err(e) => {
                    outcome.protocol_error = true;
                    Reply::new(&mut self.replies, session.proto).error(&ErrorReply::owned(e.to_string()));
                    break;
                }
            }
            input = &input[n..];
            if session.quit {
                outcome.quit = true;
                break;
            }
        }
        outcome
    }
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}
