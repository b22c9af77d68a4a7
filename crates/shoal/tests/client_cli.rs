//! The client subcommands (`shoal get/put/del/incr/scan/create-table/
//! drop-table/stats`) run as the real binary against an in-process server
//! on 127.0.0.1 (free ports): outputs, `--json`, error messages and exit
//! codes.

use serde_json::Value;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output};

fn start() -> (Server, SocketAddr) {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

/// Runs `shoal <args> --server <addr>`.
fn shoal(addr: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .args(["--server", &addr.to_string()])
        .output()
        .expect("run shoal")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must succeed; returns its stdout.
fn ok(addr: SocketAddr, args: &[&str]) -> String {
    let o = shoal(addr, args);
    assert!(o.status.success(), "shoal {args:?} failed: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Runs a command that must fail with `code`; returns its stderr.
fn fails(addr: SocketAddr, args: &[&str], code: i32) -> String {
    let o = shoal(addr, args);
    assert_eq!(o.status.code(), Some(code), "shoal {args:?}: {}{}", stdout(&o), stderr(&o));
    assert!(o.stdout.is_empty() || args.contains(&"--json"), "no output on failure: {}", stdout(&o));
    stderr(&o)
}

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

#[test]
fn password_from_flag_or_environment_logs_in() {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        requirepass: Some(shoal_server::auth::Password("pw".into())),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let a = server.addresses().native.expect("native front end");
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
        cmd.args(args).args(["--server", &a.to_string()]).env_remove("SHOAL_PASSWORD");
        if let Some(p) = env {
            cmd.env("SHOAL_PASSWORD", p);
        }
        cmd.output().expect("run shoal")
    };
    let o = run(&["create-table", "t"], None);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("requires a password"), "{}", stderr(&o));
    let o = run(&["create-table", "t", "--password", "wrong"], None);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("refused the user and password"), "{}", stderr(&o));
    let o = run(&["create-table", "t", "--password", "pw"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["put", "t", "k", "v"], Some("pw"));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["get", "t", "k", "--user", "default", "--password", "pw", "--json"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&stdout(&o))["value"], "v");
    let o = run(&["get", "t", "k", "--json"], Some("nope"));
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(json(&stdout(&o))["error"], "auth");
}

#[test]
fn every_command_with_human_output() {
    let (_server, a) = start();
    assert_eq!(ok(a, &["create-table", "users"]), "table 'users' has id 1\n");
    assert_eq!(ok(a, &["create-table", "users"]), "table 'users' has id 1\n", "create finds an existing table");

    assert_eq!(ok(a, &["put", "users", "alice", "hello world"]), "OK (version 1)\n");
    assert_eq!(ok(a, &["get", "users", "alice"]), "hello world\n(version 1)\n");
    assert_eq!(ok(a, &["put", "users", "alice", "v2", "--if-version", "1"]), "OK (version 2)\n");
    assert_eq!(ok(a, &["put", "users", "bob", "b", "--if-absent"]), "OK (version 1)\n");
    assert_eq!(ok(a, &["put", "users", "bob", "b2", "--if-present"]), "OK (version 2)\n");

    assert_eq!(ok(a, &["incr", "users", "n"]), "1 (version 1)\n");
    assert_eq!(ok(a, &["incr", "users", "n", "-6"]), "-5 (version 2)\n");
    assert_eq!(ok(a, &["get", "users", "n"]), "-5\n(version 2)\n", "counters are decimal text");

    let scan = ok(a, &["scan", "users"]);
    let mut lines: Vec<&str> = scan.lines().collect();
    assert_eq!(lines.pop(), Some("(3 objects)"));
    lines.sort();
    assert_eq!(lines[0], r#""alice" -> "v2" (version 2)"#);
    assert_eq!(lines[1], r#""bob" -> "b2" (version 2)"#);
    assert_eq!(lines[2], r#""n" -> "-5" (version 2)"#);
    let limited = ok(a, &["scan", "users", "--limit", "2"]);
    assert_eq!(limited.lines().count(), 3);
    assert!(limited.ends_with("(2 objects) (limit reached; more remain)\n"), "{limited}");

    assert_eq!(ok(a, &["del", "users", "alice"]), "removed (it had version 2)\n");
    assert_eq!(ok(a, &["del", "users", "alice"]), "nothing removed: the object did not exist\n");

    let stats = ok(a, &["stats"]);
    let objects = stats.lines().find(|l| l.starts_with("objects ")).expect("objects stat");
    assert_eq!(objects.split_whitespace().nth(1), Some("2"), "{stats}");

    assert_eq!(ok(a, &["drop-table", "users"]), "dropped table 'users'\n");
    assert!(fails(a, &["get", "users", "bob"], 1).contains("no table named 'users'"));
}

#[test]
fn json_output() {
    let (_server, a) = start();
    assert_eq!(json(&ok(a, &["create-table", "t", "--json"]))["id"], 1);
    let put = json(&ok(a, &["put", "t", "k", "v", "--json"]));
    assert_eq!(put["version"], 1);
    let get = json(&ok(a, &["get", "t", "k", "--json"]));
    assert_eq!((get["key"].as_str(), get["value"].as_str(), get["version"].as_u64()), (Some("k"), Some("v"), Some(1)));
    let incr = json(&ok(a, &["incr", "t", "c", "41", "--json"]));
    assert_eq!(incr["value"], 41);
    assert_eq!(json(&ok(a, &["incr", "t", "c", "-42", "--json"]))["value"], -1);
    let counter = json(&ok(a, &["get", "t", "c", "--json"]));
    assert_eq!(counter["value"], "-1", "counters are decimal text");

    let scan = ok(a, &["scan", "t", "--json"]);
    let mut keys: Vec<String> = scan.lines().map(|l| json(l)["key"].as_str().unwrap().to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["c", "k"]);

    let del = json(&ok(a, &["del", "t", "k", "--json"]));
    assert_eq!((del["removed"].as_bool(), del["version"].as_u64()), (Some(true), Some(1)));
    let stats = json(&ok(a, &["stats", "--json"]));
    assert_eq!(stats["objects"], 1);
    assert_eq!(json(&ok(a, &["drop-table", "t", "--json"]))["dropped"], true);

    let o = shoal(a, &["get", "t", "k", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json(&stdout(&o))["error"], "unknown_table");
}

#[test]
fn errors_have_messages_and_exit_codes() {
    let (_server, a) = start();
    ok(a, &["create-table", "t"]);
    ok(a, &["put", "t", "k", "text"]);

    assert!(fails(a, &["get", "t", "missing"], 1).contains("t/missing: no such object"));
    assert!(
        fails(a, &["put", "t", "k", "x", "--if-version", "7"], 1).contains("wrong version: the object's version is 1")
    );
    assert!(fails(a, &["put", "t", "k", "x", "--if-absent"], 1).contains("already exists (version 1)"));
    assert!(fails(a, &["put", "t", "new", "x", "--if-present"], 1).contains("t/new: the object does not exist"));
    assert!(fails(a, &["del", "t", "k", "--if-version", "9"], 1).contains("wrong version"));
    assert!(fails(a, &["incr", "t", "k"], 1).contains("not a decimal 64-bit integer"));
    assert!(fails(a, &["scan", "nope"], 1).contains("no table named 'nope' (create it with: shoal create-table nope)"));
    assert!(fails(a, &["drop-table", "nope"], 1).contains("no table named 'nope'"));
    assert_eq!(ok(a, &["get", "t", "k"]), "text\n(version 1)\n", "refused operations changed nothing");

    let o = shoal(a, &["get", "t", "missing", "--json"]);
    assert_eq!(json(&stdout(&o))["error"], "not_found");

    // Conflicting reject rules and bad arguments are usage errors.
    fails(a, &["put", "t", "k", "x", "--if-absent", "--if-present"], 2);
    fails(a, &["incr", "t", "k", "not-a-number"], 2);
}

#[test]
fn put_with_a_ttl_expires_and_ttl_shows_it() {
    let (_server, a) = start();
    ok(a, &["create-table", "t"]);
    ok(a, &["put", "t", "long", "v", "--ttl-ms", "600000"]);
    let o = ok(a, &["ttl", "t", "long"]);
    assert!(o.starts_with("expires at ") && o.contains(" ms since the Unix epoch, in "), "{o}");
    let j = json(&ok(a, &["ttl", "t", "long", "--json"]));
    let left = j["ttl_ms"].as_u64().unwrap();
    assert!(left > 590_000 && left <= 600_000, "{j}");
    assert!(j["expires_at_ms"].as_u64().unwrap() > 1_700_000_000_000, "{j}");
    ok(a, &["put", "t", "plain", "v"]);
    assert_eq!(ok(a, &["ttl", "t", "plain"]), "never expires (version 1)\n");
    assert_eq!(json(&ok(a, &["ttl", "t", "plain", "--json"]))["expires_at_ms"], Value::Null);
    ok(a, &["put", "t", "short", "v", "--ttl-ms", "100"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(fails(a, &["get", "t", "short"], 1).contains("no such object"));
    assert!(fails(a, &["ttl", "t", "short"], 1).contains("no such object"));
    fails(a, &["put", "t", "k", "v", "--ttl-ms", "0"], 2);
}

#[test]
fn connection_refused_is_exit_code_3() {
    // A port nothing listens on: bind one, then free it.
    let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let e = fails(free, &["get", "t", "k"], 3);
    assert!(e.contains(&format!("cannot talk to the server at {free}")), "{e}");
    assert!(e.contains("is a Shoal server running there?"), "{e}");
    let o = shoal(free, &["stats", "--json"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(json(&stdout(&o))["error"], "connection");
}

/// `shoal chunk ...`: a chunk table, chunks created in one request with
/// ids the server picks (node 0 on a standalone server, local ids from 1),
/// get, put, rm, the reuse of a removed id, `--json`, and the refusals.
#[test]
fn chunk_commands() {
    let (_server, a) = start();
    assert_eq!(ok(a, &["chunk", "create-table", "graph"]), "chunk table 'graph' has id 1\n");
    assert_eq!(ok(a, &["chunk", "create", "graph", "first", "second"]), "0x1\n0x2\n");
    assert_eq!(ok(a, &["chunk", "get", "graph", "0x1"]), "first\n(version 1)\n");
    assert_eq!(ok(a, &["chunk", "put", "graph", "2", "second v2"]), "OK (version 2)\n");
    assert_eq!(ok(a, &["chunk", "get", "graph", "0x2"]), "second v2\n(version 2)\n");
    assert_eq!(ok(a, &["chunk", "rm", "graph", "0x2"]), "removed (it had version 2)\n");
    assert!(fails(a, &["chunk", "get", "graph", "0x2"], 1).contains("no such object"));
    assert!(fails(a, &["chunk", "put", "graph", "0x2", "x"], 1).contains("does not exist"));
    // The removed id comes back, above its last version.
    let created = json(&ok(a, &["chunk", "create", "graph", "third", "--json"]));
    assert_eq!(created["ids"], serde_json::json!(["0x2"]));
    let got = json(&ok(a, &["chunk", "get", "graph", "0x2", "--json"]));
    assert_eq!((got["payload"].as_str(), got["version"].as_u64()), (Some("third"), Some(3)));
    let stats = ok(a, &["stats"]);
    let chunks = stats.lines().find(|l| l.starts_with("chunks ")).expect("chunks stat");
    assert_eq!(chunks.split_whitespace().nth(1), Some("2"), "{stats}");
    // Kinds do not mix.
    assert_eq!(ok(a, &["create-table", "users"]), "table 'users' has id 2\n");
    fails(a, &["chunk", "create", "users", "x"], 1);
    fails(a, &["chunk", "create-table", "users"], 1);
    fails(a, &["create-table", "graph"], 1);
    fails(a, &["chunk", "get", "graph", "zz"], 2);
    assert!(fails(a, &["put", "graph", "k", "v"], 1).contains("chunk table"));
    fails(a, &["get", "graph", "k"], 1);
}

/// `shoal chunk name/lookup/unname/names`: names for chunk ids, kept per
/// chunk table in the key-value table `chunk-names`.
#[test]
fn chunk_names() {
    let (_server, a) = start();
    ok(a, &["chunk", "create-table", "graph"]);
    ok(a, &["chunk", "create-table", "other"]);
    assert_eq!(ok(a, &["chunk", "names", "graph"]), "(0 names)\n");
    assert!(fails(a, &["chunk", "lookup", "graph", "root"], 1).contains("no chunk names"));
    assert_eq!(ok(a, &["chunk", "create", "graph", "r", "a", "b"]), "0x1\n0x2\n0x3\n");
    assert_eq!(ok(a, &["chunk", "name", "graph", "root", "0x1"]), "root -> 0x1\n");
    ok(a, &["chunk", "name", "graph", "user:alice", "0x2"]);
    ok(a, &["chunk", "name", "graph", "user:bob", "3"]);
    ok(a, &["chunk", "name", "other", "user:carol", "0x9"]);
    assert_eq!(ok(a, &["chunk", "lookup", "graph", "user:bob"]), "0x3\n");
    assert!(fails(a, &["chunk", "name", "graph", "root", "0x2"], 1).contains("taken"));
    ok(a, &["chunk", "name", "graph", "root", "0x2", "--replace"]);
    assert_eq!(ok(a, &["chunk", "lookup", "graph", "root"]), "0x2\n");
    assert_eq!(
        ok(a, &["chunk", "names", "graph", "user:"]),
        "user:alice -> 0x2\nuser:bob -> 0x3\n(2 names)\n",
        "by prefix, sorted, only this table's"
    );
    assert_eq!(ok(a, &["chunk", "unname", "graph", "user:bob"]), "removed the name user:bob\n");
    assert!(fails(a, &["chunk", "lookup", "graph", "user:bob"], 1).contains("no such object"));
    assert_eq!(ok(a, &["chunk", "names", "graph"]), "root -> 0x2\nuser:alice -> 0x2\n(2 names)\n");
}

/// `shoal stream create/produce/consume/describe` (docs/streams.md).
#[test]
fn stream_commands() {
    let (_server, addr) = start();
    let out = ok(addr, &["stream", "create", "clicks", "--streamlets", "2", "--logs", "2", "--segment-bytes", "4096"]);
    assert!(out.contains("stream 'clicks' has id") && out.contains("2 streamlet(s), 2 log(s)"), "{out}");
    assert!(ok(addr, &["stream", "produce", "clicks", "a", "b", "c"])
        .contains("appended 3 record(s) to streamlet 0 at 0:0:0"));
    // From stdin, batched; by key, to one streamlet.
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["stream", "produce", "clicks", "--key", "k", "--producer", "1", "--batch-bytes", "200"])
        .args(["--server", &addr.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for i in 0..100 {
            writeln!(stdin, "line{i}").unwrap();
        }
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let batches = stdout(&o).lines().count();
    assert!(batches > 3, "stdin went in several batches: {}", stdout(&o));
    let s: u32 = stdout(&o).split("streamlet ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let all = ok(addr, &["stream", "consume", "clicks", "--streamlet", &s.to_string()]);
    let lines: Vec<&str> = all.lines().filter(|l| l.starts_with("line")).collect();
    assert_eq!(lines, (0..100).map(|i| format!("line{i}")).collect::<Vec<_>>(), "in order, each once");
    // JSON: one object per record with its offset, then the next offset.
    let out = ok(addr, &["stream", "consume", "clicks", "--from", "0:0:1", "--limit", "2", "--json"]);
    let objs: Vec<Value> = out.lines().map(json).collect();
    assert_eq!(objs[0]["offset"], "0:0:1");
    assert_eq!(objs[0]["record"], "b");
    assert_eq!(objs[1]["record"], "c");
    assert_eq!(objs[2]["next"], "0:0:3");
    let out = ok(addr, &["stream", "describe", "clicks", "--json"]);
    let objs: Vec<Value> = out.lines().map(json).collect();
    assert_eq!(objs[0]["shape"]["streamlets"], 2);
    assert!(objs[1..].iter().any(|g| g["records"] == 100));
    // Refusals: exit code 1 with the server's reason.
    assert!(fails(addr, &["stream", "consume", "clicks", "--streamlet", "7"], 1).contains("streamlet 7 does not exist"));
    assert!(fails(addr, &["stream", "create", "clicks", "--streamlets", "3"], 1).contains("another kind"));
    ok(addr, &["create-table", "kv"]);
    assert!(fails(addr, &["stream", "produce", "kv", "x"], 1).contains("not a stream"));
    assert!(fails(addr, &["stream", "consume", "clicks", "--from", "9"], 1).contains("group 9 does not exist"));
    assert!(fails(addr, &["stream", "consume", "clicks", "--from", "1:x"], 2).contains("not group"));

    // As a consumer name: what the name has not committed, then nothing;
    // --limit stops part way and the next run goes on from there. (The
    // streamlet may also hold `a b c`, from producer 0 in another log.)
    let streamlet = s.to_string();
    let named = |limit: Option<&str>| {
        let mut args = vec!["stream", "consume", "clicks", "--streamlet", &streamlet, "--name", "billing"];
        args.extend(limit.map(|l| ["--limit", l]).into_iter().flatten());
        ok(addr, &args).lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let first = named(Some("30"));
    assert_eq!(first.len(), 30, "{first:?}");
    let mut lines: Vec<String> = first.into_iter().filter(|l| l.starts_with("line")).collect();
    lines.extend(named(None).into_iter().filter(|l| l.starts_with("line")));
    assert_eq!(lines, (0..100).map(|i| format!("line{i}")).collect::<Vec<_>>(), "in order, each once");
    assert!(named(None).is_empty(), "everything was committed");
    assert!(fails(addr, &["stream", "consume", "clicks", "--name", ""], 1).contains("a consumer name has 1-255 bytes"));
}
