//! Client authentication on the Redis port: NOAUTH before logging in, a
//! pipelined command after a failed AUTH never applied, HELLO AUTH, ACL
//! users, and redis-py compared with a real redis-server configured alike
//! (tests/auth_compat.py).

mod common;

use common::{config, have_tool, start, Client};
use shoal_server::auth::Password;
use shoal_server::ServerConfig;
use std::path::PathBuf;
use std::process::Command;

const ACL: &str = "user alice on >apw >apw2 ~* &* +@all\nuser bob off >bpw ~* +@all\nuser carol on nopass ~* +@all\n";

/// A config requiring `secret` for `default`, with the users of [`ACL`]
/// (written to a file that lives as long as the returned path's directory).
fn protected() -> (ServerConfig, PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("shoal-resp-auth-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let acl = dir.join("users.acl");
    std::fs::write(&acl, ACL).unwrap();
    let c = ServerConfig { requirepass: Some(Password("secret".into())), acl_file: Some(acl.clone()), ..config() };
    (c, acl)
}

#[test]
fn auth_wrong_then_pipelined_set_applies_nothing() {
    let (cfg, _acl) = protected();
    let server = start(cfg);
    let mut c = Client::connect(server.resp_addr());
    let mut pipeline = Vec::new();
    for cmd in [&["AUTH", "wrong"][..], &["SET", "k", "v"], &["INCR", "n"], &["GET", "k"]] {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        pipeline.extend(common::encode(&args));
    }
    c.send_raw(&pipeline);
    assert_eq!(c.read_reply(), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    for _ in 0..3 {
        assert_eq!(c.read_reply(), "-NOAUTH Authentication required.\r\n");
    }
    assert_eq!(c.call(&["AUTH", "secret"]), "+OK\r\n");
    assert_eq!(c.call(&["GET", "k"]), "$-1\r\n", "the SET after the failed AUTH was applied");
    assert_eq!(c.call(&["GET", "n"]), "$-1\r\n", "the INCR after the failed AUTH was applied");
    assert_eq!(c.call(&["DBSIZE"]), ":0\r\n");
}

#[test]
fn unauthenticated_connection_may_only_auth_hello_or_quit() {
    let (cfg, _acl) = protected();
    let server = start(cfg);
    let mut c = Client::connect(server.resp_addr());
    for cmd in [&["PING"][..], &["GET", "k"], &["SELECT", "1"], &["CONFIG", "GET", "requirepass"], &["SHOAL.LOCAL"]] {
        assert_eq!(c.call(cmd), "-NOAUTH Authentication required.\r\n", "{cmd:?}");
    }
    assert_eq!(c.call(&["GET"]), "-ERR wrong number of arguments for 'get' command\r\n", "arity comes first");
    assert!(c.call(&["HELLO", "3"]).starts_with("-NOAUTH HELLO must be called with the client already authenticated"));
    assert_eq!(c.call(&["AUTH", "bob", "bpw"]), "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert!(c.call(&["HELLO", "3", "AUTH", "alice", "apw2", "SETNAME", "me"]).starts_with("%7\r\n"));
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), "$2\r\nme\r\n");
    assert_eq!(c.call(&["CONFIG", "GET", "requirepass"]), "%1\r\n$11\r\nrequirepass\r\n$6\r\nsecret\r\n");
    // A failed AUTH leaves the connection logged in.
    assert!(c.call(&["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    assert_eq!(c.call(&["SET", "k", "v"]), "+OK\r\n");
    let mut q = Client::connect(server.resp_addr());
    assert_eq!(q.call(&["QUIT"]), "+OK\r\n");
    assert!(q.closed_by_server());
}

#[test]
fn server_without_credentials_needs_no_auth() {
    let server = start(config());
    let mut c = Client::connect(server.resp_addr());
    assert_eq!(c.call(&["GET", "k"]), "$-1\r\n");
    assert_eq!(
        c.call(&["AUTH", "x"]),
        "-ERR AUTH <password> called without any password configured for the default user. Are you sure your \
         configuration is correct?\r\n"
    );
    assert_eq!(c.call(&["AUTH", "default", "anything"]), "+OK\r\n");
    assert_eq!(c.call(&["CONFIG", "GET", "requirepass"]), "*2\r\n$11\r\nrequirepass\r\n$0\r\n\r\n");
}

#[test]
fn redis_py_auth_matches_a_real_redis_server() {
    if !have_tool("redis-server", &["--version"]) || !have_tool("python3", &["-c", "import redis"]) {
        return;
    }
    let (cfg, acl) = protected();
    let server = start(cfg);
    let open = start(config());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/auth_compat.py");
    let out = Command::new("python3")
        .args([script, "--shoal-port", &server.resp_addr().port().to_string()])
        .args(["--shoal-open-port", &open.resp_addr().port().to_string()])
        .args(["--acl-file", acl.to_str().unwrap()])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "replies differ from Redis:\n{stdout}");
    assert!(stdout.contains(", 0 differences"));
}
