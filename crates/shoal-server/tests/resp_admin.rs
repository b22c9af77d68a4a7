//! The server commands whose effect is on connections, over real sockets:
//! CLIENT KILL really closes (also a connection blocked reading), MONITOR
//! streams other clients' commands and disconnects a monitor that does not
//! read, CONFIG SET timeout reaches connections already open, and
//! INCRBYFLOAT's text is what GET and INCR then see. Replies are compared
//! with a real Redis in tests/resp_server_compat.py (redis_tools.rs).

mod common;

use common::{config, start, Client};
use shoal_server::ByteSize;
use std::io::Read;
use std::time::{Duration, Instant};

/// The value of `field` in a CLIENT LIST / CLIENT INFO line.
fn field(line: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    line.split_whitespace().find_map(|f| f.strip_prefix(&prefix)).unwrap_or_default().to_string()
}

#[test]
fn client_kill_closes_a_connection_blocked_reading() {
    let server = start(config());
    let mut killer = Client::connect(server.resp_addr());
    for how in ["ID", "ADDR", "OLD"] {
        let mut victim = Client::connect(server.resp_addr());
        let info = victim.call(&["CLIENT", "INFO"]);
        let (id, addr) = (field(&info, "id"), field(&info, "addr"));
        assert!(killer.call(&["CLIENT", "LIST"]).contains(&format!("id={id} ")));
        // The victim now waits for a request: killing must wake it.
        let reply = match how {
            "ID" => killer.call(&["CLIENT", "KILL", "ID", &id]),
            "ADDR" => killer.call(&["CLIENT", "KILL", "ADDR", &addr]),
            _ => killer.call(&["CLIENT", "KILL", &addr]),
        };
        assert_eq!(reply, if how == "OLD" { "+OK\r\n" } else { ":1\r\n" }, "{how}");
        assert!(victim.closed_by_server(), "{how}: the connection was closed");
        let deadline = Instant::now() + Duration::from_secs(5);
        while killer.call(&["CLIENT", "LIST"]).contains(&format!("id={id} ")) {
            assert!(Instant::now() < deadline, "{how}: the killed connection left the list");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(killer.call(&["CLIENT", "KILL", "1.2.3.4:5"]), "-ERR No such client\r\n");
    // Killing itself: the reply arrives, then the connection closes.
    let id = field(&killer.call(&["CLIENT", "INFO"]), "id");
    assert_eq!(killer.call(&["CLIENT", "KILL", "ID", &id, "SKIPME", "no"]), ":1\r\n");
    assert!(killer.closed_by_server());
}

#[test]
fn monitor_streams_commands_and_a_monitor_that_does_not_read_is_disconnected() {
    let mut cfg = config();
    cfg.max_value_size = ByteSize(64 << 10);
    cfg.max_request_size = ByteSize(128 << 10);
    cfg.request_buffer_size = ByteSize(256 << 10);
    cfg.reply_buffer_size = ByteSize(256 << 10);
    let server = start(cfg);
    let mut monitor = Client::connect(server.resp_addr());
    assert_eq!(monitor.call(&["MONITOR"]), "+OK\r\n");
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["SET", "k", "a\"b"]), "+OK\r\n");
    let line = monitor.read_reply();
    assert!(line.starts_with('+') && line.ends_with(" \"SET\" \"k\" \"a\\\"b\"\r\n"), "{line:?}");
    assert!(line.contains(&format!("[0 {}]", c.stream.local_addr().unwrap())), "{line:?}");
    // Admin commands are not shown; the next line is the PING.
    c.call(&["CONFIG", "GET", "timeout"]);
    c.call(&["PING"]);
    assert!(monitor.read_reply().ends_with("\"PING\"\r\n"));
    // Now the monitor stops reading: its feed is bounded, so it is closed.
    let value = "v".repeat(4000);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.call(&["CLIENT", "LIST"]).contains("flags=O") {
        assert!(Instant::now() < deadline, "the monitor was never disconnected");
        for _ in 0..50 {
            c.call(&["SET", "k", &value]);
        }
    }
    let mut rest = Vec::new();
    monitor.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = monitor.reader.read_to_end(&mut rest);
    assert!(rest.len() < 16 << 20, "what the monitor held stayed bounded: {} bytes", rest.len());
    assert_eq!(c.call(&["PING"]), "+PONG\r\n", "others are still served");
}

#[test]
fn config_set_timeout_closes_idle_connections_already_open() {
    let server = start(config());
    let mut idle = Client::connect(server.resp_addr());
    assert_eq!(idle.call(&["PING"]), "+PONG\r\n");
    let mut admin = Client::connect(server.resp_addr());
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "1"]), "+OK\r\n");
    assert_eq!(admin.call(&["CONFIG", "GET", "timeout"]), "*2\r\n$7\r\ntimeout\r\n$1\r\n1\r\n");
    let started = Instant::now();
    assert!(idle.closed_by_server());
    assert!(started.elapsed() < Duration::from_secs(5));
    // The admin connection idles as long and closes too: a new one.
    let mut admin = Client::connect(server.resp_addr());
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "0"]), "+OK\r\n");
    assert_eq!(
        admin.call(&["CONFIG", "SET", "timeout", "x"]).lines().next().unwrap(),
        "-ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer"
    );
}

#[test]
fn incrbyfloat_text_is_what_get_and_incr_see() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "10.5"]), "$4\r\n10.5\r\n");
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "-0.5"]), "$2\r\n10\r\n");
    assert_eq!(c.call(&["INCR", "f"]), ":11\r\n", "an integral sum is stored without a point");
    assert_eq!(c.call(&["SET", "f", "1e400", "EX", "100"]), "+OK\r\n");
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "1"]).len(), 6 + 401 + 2, "beyond f64: 401 digits");
    assert_eq!(c.call(&["TTL", "f"]), ":100\r\n", "the expiry is kept");
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "inf"]), "-ERR increment would produce NaN or Infinity\r\n");
    assert_eq!(c.call(&["INCRBYFLOAT", "f", "1x"]), "-ERR value is not a valid float\r\n");
}
