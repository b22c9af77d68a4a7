//! The registry of Redis client connections: what CLIENT LIST and CLIENT
//! INFO report, how CLIENT KILL reaches a connection, and the feeds of
//! MONITOR connections.
//!
//! Each connection owns a [`ClientSlot`], registered while it lives. The
//! connection updates its slot on its own request path with relaxed atomic
//! stores (last command, database, activity, buffer sizes); the text fields
//! (name, library, user) change only by command, under the slot's own lock.
//! The registry's lock is taken when a connection opens or closes and by
//! the (rare) commands that list or search connections, never per command.
//!
//! Other connections talk to one through its mailbox: a kill flag and, for
//! a monitor, a buffer of lines, with a wake-up the connection driver waits
//! on beside its socket, so a killed connection closes even while it is
//! blocked reading. A monitor's buffer is bounded: a monitor that does not
//! keep up is disconnected rather than allowed to grow.

use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// One client connection's entry.
pub struct ClientSlot {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: Option<SocketAddr>,
    /// The socket's file descriptor, -1 if unknown.
    pub fd: i64,
    created: Instant,
    /// Milliseconds from `created` to the last command.
    last_active_ms: AtomicU64,
    /// The last command: its position in the command table plus one (0:
    /// none) in the low 16 bits, its subcommand's plus one above.
    last_cmd: AtomicU32,
    pub db: AtomicUsize,
    /// Commands queued since MULTI; -1 outside a transaction.
    pub multi: AtomicI64,
    /// RESP protocol version (2 or 3).
    pub resp: AtomicU32,
    /// Bytes received and not yet executed, and the input buffer's size.
    pub qbuf: AtomicUsize,
    pub qbuf_cap: AtomicUsize,
    /// Bytes of replies not yet sent, and the output buffer's size.
    pub obl: AtomicUsize,
    pub omem: AtomicUsize,
    text: Mutex<ClientText>,
    /// Set once the connection is a monitor.
    monitor: AtomicBool,
    killed: AtomicBool,
    /// A monitor's lines not yet taken by its connection.
    feed: Mutex<Vec<u8>>,
    wake: Notify,
}

/// A client's names, set by command.
#[derive(Clone, Default)]
pub struct ClientText {
    pub name: Vec<u8>,
    pub lib_name: Vec<u8>,
    pub lib_ver: Vec<u8>,
    pub user: Vec<u8>,
}

/// What a connection finds in its mailbox.
pub enum Mail {
    /// Close now (CLIENT KILL, or a monitor that fell behind).
    Kill,
    /// Nothing to close for; monitor lines (if any) were appended.
    Continue,
}

impl ClientSlot {
    pub fn new(id: u64, addr: SocketAddr, laddr: Option<SocketAddr>, fd: i64) -> ClientSlot {
        ClientSlot {
            id,
            addr,
            laddr,
            fd,
            created: Instant::now(),
            last_active_ms: AtomicU64::new(0),
            last_cmd: AtomicU32::new(0),
            db: AtomicUsize::new(0),
            multi: AtomicI64::new(-1),
            resp: AtomicU32::new(2),
            qbuf: AtomicUsize::new(0),
            qbuf_cap: AtomicUsize::new(0),
            obl: AtomicUsize::new(0),
            omem: AtomicUsize::new(0),
            text: Mutex::new(ClientText { user: b"default".to_vec(), ..ClientText::default() }),
            monitor: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            feed: Mutex::new(Vec::new()),
            wake: Notify::new(),
        }
    }

    /// Records a command (table positions of the command and subcommand) at `now`.
    pub fn record_command(&self, index: usize, sub: Option<usize>, now: Instant) {
        let code = (index as u32 + 1) & 0xffff | (sub.map_or(0, |s| s as u32 + 1) << 16);
        self.last_cmd.store(code, Ordering::Relaxed);
        let ms = now.saturating_duration_since(self.created).as_millis() as u64;
        self.last_active_ms.store(ms, Ordering::Relaxed);
    }

    /// The last command's (table position, subcommand position).
    pub fn last_command(&self) -> Option<(usize, Option<usize>)> {
        let code = self.last_cmd.load(Ordering::Relaxed);
        let index = (code & 0xffff).checked_sub(1)? as usize;
        Some((index, (code >> 16).checked_sub(1).map(|s| s as usize)))
    }

    /// Seconds since the connection opened, and since its last command.
    pub fn age_and_idle(&self, now: Instant) -> (u64, u64) {
        let age = now.saturating_duration_since(self.created);
        let active = std::time::Duration::from_millis(self.last_active_ms.load(Ordering::Relaxed));
        (age.as_secs(), age.saturating_sub(active).as_secs())
    }

    pub fn text(&self) -> ClientText {
        self.text.lock().clone()
    }

    pub fn update_text(&self, f: impl FnOnce(&mut ClientText)) {
        f(&mut self.text.lock());
    }

    pub fn is_monitor(&self) -> bool {
        self.monitor.load(Ordering::Relaxed)
    }

    /// Asks the connection to close; it does at once, even if blocked reading.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Waits until there is mail (a kill, monitor lines).
    pub async fn mail(&self) {
        self.wake.notified().await
    }

    /// Takes the mail: appends a monitor's lines to `out`.
    pub fn take_mail(&self, out: &mut bytes::BytesMut) -> Mail {
        if self.killed.load(Ordering::Acquire) {
            return Mail::Kill;
        }
        let mut feed = self.feed.lock();
        out.extend_from_slice(&feed);
        feed.clear();
        if feed.capacity() > 64 << 10 {
            *feed = Vec::new();
        }
        Mail::Continue
    }

    /// Appends a line to a monitor's feed; past `limit` bytes untaken the
    /// monitor is killed instead.
    fn feed(&self, line: &[u8], limit: usize) {
        let mut feed = self.feed.lock();
        if feed.len() + line.len() > limit {
            drop(feed);
            self.kill();
            return;
        }
        let was_empty = feed.is_empty();
        feed.extend_from_slice(line);
        drop(feed);
        if was_empty {
            self.wake.notify_one();
        }
    }
}

/// Every open Redis client connection, by id.
#[derive(Default)]
pub struct ClientRegistry {
    clients: Mutex<BTreeMap<u64, Arc<ClientSlot>>>,
    monitors: RwLock<Vec<Arc<ClientSlot>>>,
    /// `monitors.len()`, read without the lock on every command.
    monitor_count: AtomicUsize,
}

impl ClientRegistry {
    pub fn register(&self, slot: Arc<ClientSlot>) {
        self.clients.lock().insert(slot.id, slot);
    }

    pub fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
        let mut monitors = self.monitors.write();
        if let Some(i) = monitors.iter().position(|m| m.id == id) {
            monitors.swap_remove(i);
            self.monitor_count.store(monitors.len(), Ordering::Relaxed);
        }
    }

    /// Every registered client, by id.
    pub fn list(&self) -> Vec<Arc<ClientSlot>> {
        self.clients.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientSlot>> {
        self.clients.lock().get(&id).cloned()
    }

    /// Wakes every connection to re-read the settings (CONFIG SET timeout).
    pub fn wake_all(&self) {
        for c in self.clients.lock().values() {
            c.wake.notify_one();
        }
    }

    /// Makes `slot` a monitor: it is fed every command run from now on.
    pub fn add_monitor(&self, slot: &Arc<ClientSlot>) {
        if slot.monitor.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut monitors = self.monitors.write();
        monitors.push(slot.clone());
        self.monitor_count.store(monitors.len(), Ordering::Relaxed);
    }

    /// Whether any monitor is connected (one load: call per command).
    pub fn monitored(&self) -> bool {
        self.monitor_count.load(Ordering::Relaxed) > 0
    }

    /// Sends `line` to every monitor but `from` (a monitor does not see
    /// its own commands); a monitor holding `limit` bytes untaken is killed.
    pub fn feed_monitors(&self, from: u64, line: &[u8], limit: usize) {
        for m in self.monitors.read().iter() {
            if m.id != from {
                m.feed(line, limit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(id: u64) -> Arc<ClientSlot> {
        Arc::new(ClientSlot::new(id, "127.0.0.1:1000".parse().unwrap(), None, -1))
    }

    #[test]
    fn monitor_feed_is_bounded_and_a_slow_monitor_is_killed() {
        let reg = ClientRegistry::default();
        let (a, m) = (slot(1), slot(2));
        reg.register(a.clone());
        reg.register(m.clone());
        assert!(!reg.monitored());
        reg.add_monitor(&m);
        assert!(reg.monitored());
        reg.feed_monitors(1, b"+line\r\n", 16);
        reg.feed_monitors(2, b"+own\r\n", 16);
        let mut out = bytes::BytesMut::new();
        assert!(matches!(m.take_mail(&mut out), Mail::Continue));
        assert_eq!(&out[..], b"+line\r\n");
        reg.feed_monitors(1, b"+0123456789\r\n", 16);
        reg.feed_monitors(1, b"+0123456789\r\n", 16);
        assert!(matches!(m.take_mail(&mut out), Mail::Kill), "over the bound: killed, not grown");
        reg.unregister(2);
        assert!(!reg.monitored());
        assert_eq!(reg.list().len(), 1);
    }

    #[test]
    fn record_command_round_trips_and_idle_counts_from_it() {
        let s = slot(1);
        assert_eq!(s.last_command(), None);
        s.record_command(7, Some(2), Instant::now());
        assert_eq!(s.last_command(), Some((7, Some(2))));
        s.record_command(0, None, Instant::now());
        assert_eq!(s.last_command(), Some((0, None)));
        let (age, idle) = s.age_and_idle(Instant::now());
        assert!(age <= 1 && idle <= age);
    }
}
