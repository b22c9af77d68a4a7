//! Helpers shared by the integration tests: an in-process server on a free
//! loopback port, a blocking RESP client over a raw socket, and the check
//! for external tools (which fails in CI and skips loudly elsewhere).

#![allow(dead_code)]

pub mod cluster;

use shoal_server::{ByteSize, Server, ServerConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A small server config on 127.0.0.1 with free ports.
pub fn config() -> ServerConfig {
    ServerConfig {
        resp_port: 0,
        memcached_port: 0,
        native_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        ..ServerConfig::default()
    }
}

pub fn start(config: ServerConfig) -> Server {
    Server::start(config).expect("server starts")
}

/// A blocking RESP client that reads whole replies as text.
pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub stream: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        Client { reader: BufReader::new(stream.try_clone().unwrap()), stream }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends one command as a multibulk request.
    pub fn send(&mut self, args: &[&[u8]]) {
        let req = encode(args);
        self.send_raw(&req);
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&args);
        self.read_reply()
    }

    /// Reads one complete reply; its bytes as text (lossy).
    pub fn read_reply(&mut self) -> String {
        let mut out = Vec::new();
        read_value(&mut self.reader, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Whether the server closed the connection (EOF or reset) within the read timeout.
    pub fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 1024];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

fn read_line<R: BufRead>(r: &mut R, out: &mut Vec<u8>) -> String {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).expect("read reply");
    assert!(line.ends_with(b"\r\n"), "incomplete reply line {:?}", String::from_utf8_lossy(&line));
    out.extend_from_slice(&line);
    String::from_utf8_lossy(&line[..line.len() - 2]).into_owned()
}

fn read_value<R: BufRead>(r: &mut R, out: &mut Vec<u8>) {
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind).expect("reply type byte");
    out.push(kind[0]);
    let rest = read_line(r, out);
    let count = || rest.parse::<i64>().expect("count");
    match kind[0] {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' => {}
        b'$' | b'=' => {
            let n = count();
            if n >= 0 {
                let mut data = vec![0u8; n as usize + 2];
                r.read_exact(&mut data).expect("bulk data");
                out.extend_from_slice(&data);
            }
        }
        b'*' | b'~' => {
            for _ in 0..count().max(0) {
                read_value(r, out);
            }
        }
        b'%' => {
            for _ in 0..2 * count() {
                read_value(r, out);
            }
        }
        other => panic!("unexpected reply type {:?}", other as char),
    }
}

/// Whether `tool` can be run. Missing in CI (CI set): a failure. Missing
/// elsewhere: a loud message and `false`, so the caller skips.
pub fn have_tool(tool: &str, probe: &[&str]) -> bool {
    let ok = std::process::Command::new(tool)
        .args(probe)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let msg = format!(
            "`{tool} {}` failed: install redis-server, redis-tools and python3 -m pip install redis \
             (scripts/check does this)",
            probe.join(" ")
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    }
    ok
}
