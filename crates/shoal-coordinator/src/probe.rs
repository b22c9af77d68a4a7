//! The coordinator's own check of a suspected server: native PINGs.
//!
//! A server is alive only if it *answers*: a process stopped with SIGSTOP
//! still completes TCP handshakes (the kernel queues them on its listen
//! backlog) but never reads, so a connect proves nothing. Each attempt
//! opens a fresh connection, sends one PING frame and waits for a response
//! frame carrying its request id, all within the attempt's timeout. Any
//! well-framed response counts, whatever its status (a busy server saying
//! so is alive).

use shoal_proto::{check_frame, FrameError, Request, HEADER_LEN};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response body a probe reads: a PING answer has a one-byte body;
/// an error status carries a short message.
const MAX_PROBE_BODY: u32 = 64 << 10;

/// How the coordinator checks a suspect: `attempts` PINGs, each answered
/// within `timeout` or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    pub attempts: u32,
    pub timeout: Duration,
}

impl Default for ProbeConfig {
    fn default() -> ProbeConfig {
        ProbeConfig { attempts: 2, timeout: Duration::from_millis(250) }
    }
}

/// Whether the server at `addr` answers any of `config.attempts` PINGs.
/// On failure, the reason of the last attempt.
pub async fn probe(addr: SocketAddr, config: ProbeConfig) -> Result<(), String> {
    let mut last = String::from("no attempt made");
    for attempt in 1..=config.attempts.max(1) {
        match tokio::time::timeout(config.timeout, ping(addr, attempt as u64)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("no answer within {:?}", config.timeout),
        }
        tracing::debug!("ping {attempt} of {} to {addr} failed: {last}", config.attempts);
    }
    Err(last)
}

/// One PING on a new connection, with request id `id`.
async fn ping(addr: SocketAddr, id: u64) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("cannot connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let mut frame = Vec::new();
    Request::Ping.encode(id, &mut frame);
    stream.write_all(&frame).await.map_err(|e| format!("cannot send: {e}"))?;
    let mut buf = vec![0u8; HEADER_LEN];
    stream.read_exact(&mut buf).await.map_err(|e| format!("no answer: {e}"))?;
    let header = loop {
        match check_frame(&buf, MAX_PROBE_BODY) {
            Ok(Some(h)) => break h,
            Ok(None) => {
                // The header is there; read the body it announces (bounded above).
                let mut more = vec![0u8; buf.len().max(1)];
                let n = stream.read(&mut more).await.map_err(|e| format!("answer cut: {e}"))?;
                if n == 0 {
                    return Err("answer cut short".into());
                }
                buf.extend_from_slice(&more[..n]);
            }
            // A Shoal server that speaks another version or answers big is alive.
            Err(FrameError::UnsupportedVersion { header, .. }) | Err(FrameError::TooLarge { header, .. }) => {
                break header
            }
            Err(e) => return Err(format!("not a Shoal answer: {e}")),
        }
    };
    if !header.is_response() || header.request_id != id {
        return Err(format!("unexpected frame (flags {:#x}, request id {})", header.flags, header.request_id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn refused_connection_fails_fast() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let started = std::time::Instant::now();
        assert!(probe(port, ProbeConfig::default()).await.is_err());
        assert!(started.elapsed() < Duration::from_millis(400));
    }

    #[tokio::test]
    async fn garbage_is_not_an_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let _ = s.write_all(b"+PONG\r\n0123456789abcdef").await;
            }
        });
        let err = probe(addr, ProbeConfig::default()).await.unwrap_err();
        assert!(err.contains("not a Shoal answer"), "{err}");
    }
}
