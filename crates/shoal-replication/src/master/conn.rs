//! The replication thread's I/O: the driver loop that runs the core when
//! the log or a backup has news, one task per backup connection that
//! connects, writes whatever the core queued (one `write_all` of the
//! gathered buffer per wake) and reads the backup's answers, and the
//! requests that record replica floors at the coordinator.

use super::state::State;
use super::Inner;
use crate::wire::{Header, Kind, HEADER_LEN};
use shoal_cluster::tls::{InternalReadHalf, InternalStream, InternalWriteHalf};
use shoal_cluster::ServerId;
use shoal_common::SegmentId;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// Largest answer body a master accepts (REFUSED and ERROR texts are cut
/// to 1 KiB by their senders; every other answer is a few bytes).
const MAX_ANSWER_BODY: usize = 4096;
/// Read buffer of a connection: many answers per read.
const READ_BUFFER: usize = 64 << 10;

/// The replication thread's main task: runs until shutdown.
pub(super) async fn drive(inner: Arc<Inner>) {
    let tick = (inner.replica_timeout / 4).clamp(Duration::from_millis(5), Duration::from_millis(100));
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = inner.notify.notified() => {}
            _ = ticks.tick() => {}
        }
        if inner.state.lock().shut {
            break;
        }
        step(&inner);
    }
    let tasks: Vec<_> = inner.state.lock().conns.values_mut().filter_map(|c| c.task.take()).collect();
    for t in tasks {
        t.abort();
    }
}

/// Runs the core once and carries out what it decided: spawns new
/// connections, wakes writers with queued bytes, aborts dropped
/// connections, publishes the durable position.
pub(super) fn step(inner: &Arc<Inner>) {
    let mut st = inner.state.lock();
    if st.shut {
        return;
    }
    let now = Instant::now();
    let moved = st.pump(now);
    spawn_and_wake(inner, &mut st);
    let killed = std::mem::take(&mut st.killed);
    let durable = st.durable;
    let source = inner.source.lock().clone();
    let fetches = st.take_fetches(now, source.is_some());
    let floors = std::mem::take(&mut st.floors_out);
    drop(st);
    for k in killed {
        k.abort();
    }
    if moved {
        inner.publish(durable);
    }
    if let Some(source) = source {
        for id in fetches {
            tokio::spawn(fetch(inner.clone(), source.clone(), id));
        }
    }
    if let (false, Some(recorder)) = (floors.is_empty(), inner.floor_recorder.clone()) {
        tokio::spawn(record_floors(inner.clone(), recorder, floors));
    }
}

/// Records floors at the coordinator, then lets the core go on (the
/// segments' writes wait until then). A failure is logged; the core asks
/// again after a backoff.
async fn record_floors(inner: Arc<Inner>, recorder: super::FloorRecorder, floors: super::FloorRequest) {
    let result = recorder.record(floors.clone()).await;
    let list = || {
        let replicas = floors.replicas.iter().map(|(s, e)| format!("replica floor {}@{e}", s.0));
        replicas.chain(floors.head.map(|h| format!("head floor {}", h.0))).collect::<Vec<_>>().join(", ")
    };
    match &result {
        Ok(()) if floors.replicas.is_empty() => debug!("recorded at the coordinator: {}", list()),
        Ok(()) => info!("recorded at the coordinator (segment@epoch): {}", list()),
        Err(e) => warn!(
            "cannot record floors ({}) at the coordinator: {e}; writes to those segments wait until it \
             answers; retrying",
            list()
        ),
    }
    inner.state.lock().floors_recorded(&floors, result.is_ok(), Instant::now());
    step(&inner);
}

/// Gets a closed segment's bytes from the store (on a blocking thread: a
/// copy of up to a segment, and the log's lock) and starts its copy.
async fn fetch(inner: Arc<Inner>, source: super::SegmentSource, id: SegmentId) {
    let bytes = tokio::task::spawn_blocking(move || source(id)).await.unwrap_or(None);
    inner.state.lock().copy_ready(id, bytes, Instant::now());
    step(&inner);
}

fn spawn_and_wake(inner: &Arc<Inner>, st: &mut State) {
    let timeout = st.settings.replica_timeout;
    for (&id, c) in st.conns.iter_mut() {
        if c.task.is_none() {
            let task = tokio::spawn(run(inner.clone(), id, c.gen, c.addr, c.wake.clone(), timeout));
            c.task = Some(task.abort_handle());
        }
        if c.dirty {
            c.dirty = false;
            c.wake.notify_one();
        }
    }
}

/// One connection's life: connect, then write and read until either fails.
async fn run(inner: Arc<Inner>, id: ServerId, gen: u64, addr: SocketAddr, wake: Arc<Notify>, timeout: Duration) {
    let master = inner.state.lock().settings.master;
    let why = match connect(addr, master, timeout).await {
        Ok(stream) => {
            let (rd, wr) = stream.split();
            tokio::select! {
                e = read(&inner, id, gen, rd) => e,
                e = write(&inner, id, gen, wr, &wake) => e,
            }
        }
        Err(e) => format!("could not connect to {addr}: {e}"),
    };
    let mut st = inner.state.lock();
    // This task is ending: nothing to abort.
    if let Some(c) = st.conns.get_mut(&id).filter(|c| c.gen == gen) {
        c.task = None;
    }
    st.fail_conn(id, gen, &why, Instant::now());
    drop(st);
    step(&inner);
}

async fn connect(addr: SocketAddr, master: ServerId, timeout: Duration) -> std::io::Result<InternalStream> {
    tokio::time::timeout(timeout, crate::dial::connect(addr, Some(master)))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
}

/// Sends what the core queued for this connection: the whole buffer at
/// once, swapped out under the lock so the core keeps appending meanwhile.
async fn write(inner: &Inner, id: ServerId, gen: u64, mut wr: InternalWriteHalf, wake: &Notify) -> String {
    let mut buf = Vec::new();
    loop {
        {
            let mut st = inner.state.lock();
            let Some(c) = st.conns.get_mut(&id).filter(|c| c.gen == gen) else {
                return "connection dropped".into();
            };
            std::mem::swap(&mut c.out, &mut buf);
        }
        if buf.is_empty() {
            wake.notified().await;
            continue;
        }
        // The flush sends what a TLS session still holds (nothing to do on
        // a plain socket).
        if let Err(e) = wr.write_all(&buf).await {
            return format!("write failed: {e}");
        }
        if let Err(e) = wr.flush().await {
            return format!("write failed: {e}");
        }
        buf.clear();
    }
}

/// Reads answers, applies every whole frame of a read under one lock, then
/// runs the core.
async fn read(inner: &Arc<Inner>, id: ServerId, gen: u64, mut rd: InternalReadHalf) -> String {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut have = 0;
    loop {
        let n = match rd.read(&mut buf[have..]).await {
            Ok(0) => return "the backup closed the connection".into(),
            Ok(n) => n,
            Err(e) => return format!("read failed: {e}"),
        };
        have += n;
        let mut at = 0;
        let mut failed = None;
        {
            let mut st = inner.state.lock();
            let now = Instant::now();
            while have - at >= HEADER_LEN {
                let head: &[u8; HEADER_LEN] = buf[at..at + HEADER_LEN].try_into().expect("16 bytes");
                let h = match Header::decode(head, MAX_ANSWER_BODY) {
                    Ok(h) => h,
                    Err(e) => {
                        failed = Some(format!("bad frame from the backup: {e}"));
                        break;
                    }
                };
                if (h.kind as u8) < 0x80 {
                    failed = Some(format!("a request ({:?}) from the backup", h.kind));
                    break;
                }
                if have - at < HEADER_LEN + h.body_len {
                    break;
                }
                let body = &buf[at + HEADER_LEN..at + HEADER_LEN + h.body_len];
                at += HEADER_LEN + h.body_len;
                if let Err(e) = st.on_frame(id, gen, h.kind, h.segment, body, now) {
                    failed = Some(e);
                    break;
                }
                if h.kind == Kind::Error {
                    break;
                }
            }
        }
        if let Some(why) = failed {
            return why;
        }
        buf.copy_within(at..have, 0);
        have -= at;
        step(inner);
    }
}
