//! RANDOMKEY, OBJECT and MEMORY USAGE on a standalone server (their
//! replies for the cases a differential test against Redis cannot pin:
//! random choices and Shoal's own byte counts).

mod common;

use common::{config, start, Client};
use std::collections::HashSet;

#[test]
fn randomkey_returns_only_keys_that_exist() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["RANDOMKEY"]), "$-1\r\n", "an empty database");
    assert_eq!(c.call(&["SET", "only", "1"]), "+OK\r\n");
    for _ in 0..20 {
        assert_eq!(c.call(&["RANDOMKEY"]), "$4\r\nonly\r\n");
    }
    let keys: HashSet<String> = (0..50).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&["SET", k, "v"]), "+OK\r\n");
    }
    assert_eq!(c.call(&["DEL", "only"]), ":1\r\n");
    let mut seen = HashSet::new();
    for _ in 0..200 {
        let reply = c.call(&["RANDOMKEY"]);
        let key = reply.split("\r\n").nth(1).unwrap().to_string();
        assert!(keys.contains(&key), "{reply}");
        seen.insert(key);
    }
    assert!(seen.len() > 10, "200 draws found only {} of 50 keys", seen.len());
    assert_eq!(c.call(&["SELECT", "3"]), "+OK\r\n");
    assert_eq!(c.call(&["RANDOMKEY"]), "$-1\r\n", "another database is empty");
}

#[test]
fn object_encoding_and_memory_usage_describe_the_value() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    for (value, encoding) in [("12345", "int"), ("hello", "embstr"), (&"x".repeat(45)[..], "raw")] {
        assert_eq!(c.call(&["SET", "k", value]), "+OK\r\n");
        assert_eq!(c.call(&["OBJECT", "ENCODING", "k"]), format!("${}\r\n{encoding}\r\n", encoding.len()));
        let usage: usize = c.call(&["MEMORY", "USAGE", "k"])[1..].trim().parse().unwrap();
        // At least the key, the value and the hash-table reference; a few
        // bytes of entry header beyond.
        assert!(usage > 1 + value.len() + 8 && usage < 1 + value.len() + 8 + 24, "{usage} for {value:?}");
    }
    assert_eq!(c.call(&["OBJECT", "ENCODING", "missing"]), "$-1\r\n");
    assert_eq!(c.call(&["MEMORY", "USAGE", "missing"]), "$-1\r\n");
    assert!(c.call(&["OBJECT", "FREQ", "k"]).starts_with("-ERR An LFU maxmemory policy is not selected"));
    assert_eq!(c.call(&["OBJECT", "IDLETIME", "k"]), "-ERR unknown subcommand 'IDLETIME'. Try OBJECT HELP.\r\n");
}
