//! The client library over TLS against an in-process server whose native
//! port speaks TLS: the blocking and async clients (operations, a deep
//! pipeline, multi-ops, values larger than a TLS record), mutual TLS (no
//! certificate, one from another CA), a clear-text client on the TLS port
//! (PING only), and a name check.

use shoal_client::blocking;
use shoal_client::*;
use shoal_server::tls::LocalPki;
use shoal_server::{ByteSize, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Certificates in a directory removed at the end (kept if the test failed).
struct Pki(PathBuf, LocalPki);

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("shoal-client-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = LocalPki::create_or_load(&dir).expect("certificates");
        Pki(dir, files)
    }

    /// Trusts this CA; presents this client certificate when `identify`.
    fn client(&self, identify: bool) -> ClientTls {
        let f = &self.1;
        let identity = identify.then_some((f.client_cert.as_path(), f.client_key.as_path()));
        ClientTls::new(Some(&f.ca), identity).unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn start(pki: &Pki, mutual: bool) -> (Server, SocketAddr) {
    let config = ServerConfig {
        native_port: 0,
        resp_port: 0,
        memcached_port: 0,
        memory: ByteSize(64 << 20),
        log_level: "warn".into(),
        tls_cert: Some(pki.1.server_cert.clone()),
        tls_key: Some(pki.1.server_key.clone()),
        tls_ca: mutual.then(|| pki.1.ca.clone()),
        ..ServerConfig::default()
    };
    let server = Server::start(config).expect("server starts");
    let addr = server.addresses().native.expect("native front end");
    (server, addr)
}

fn config(tls: Option<ClientTls>) -> ClientConfig {
    ClientConfig { tls, timeout: Some(Duration::from_secs(10)), ..ClientConfig::default() }
}

#[test]
fn blocking_client_over_mutual_tls() {
    let pki = Pki::new("blocking");
    let (server, addr) = start(&pki, true);
    let mut c = blocking::Client::with_config(addr, config(Some(pki.client(true)))).unwrap();
    c.ping().unwrap();
    let t = c.create_table("t").unwrap();
    let v = c.write(t, b"k", b"v").unwrap();
    assert_eq!(c.read(t, b"k").unwrap(), (b"v".to_vec(), v));
    assert_eq!(c.increment(t, b"n", 7).unwrap().0, 7);
    // A value of several TLS records (16 KiB each), both ways.
    let big = vec![0xabu8; 300 << 10];
    c.write(t, b"big", &big).unwrap();
    assert_eq!(c.read(t, b"big").unwrap().0, big);
    // A multi-write of 500 objects in one go.
    let keys: Vec<Vec<u8>> = (0..500u32).map(|i| format!("m{i}").into_bytes()).collect();
    let items: Vec<_> =
        keys.iter().map(|k| WriteItem { table: t, key: k, value: k, rules: RejectRules::default() }).collect();
    assert!(c.multi_write(&items).unwrap().iter().all(|r| r.is_ok()));
    assert_eq!(c.read(t, b"m499").unwrap().0, b"m499");
    let stats = c.stats().unwrap();
    let handshakes = stats.iter().find(|(name, _)| name == "tls_handshakes").map(|(_, v)| *v);
    assert_eq!(handshakes, Some(StatValue::U64(1)));
    drop(server);
}

#[test]
fn async_client_pipelines_over_tls() {
    let pki = Pki::new("async");
    let (_server, addr) = start(&pki, false);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let c = Client::with_config(addr, config(Some(pki.client(false)))).await.unwrap();
        let t = c.create_table("t").await.unwrap();
        // 2000 writes in flight at once on one connection, then as many reads.
        let keys: Vec<String> = (0..2000).map(|i| format!("key{i}")).collect();
        let writes = keys.iter().map(|k| c.write(t, k.as_bytes(), k.as_bytes()));
        for r in futures_join_all(writes).await {
            r.unwrap();
        }
        let reads = keys.iter().map(|k| c.read(t, k.as_bytes()));
        for (k, r) in keys.iter().zip(futures_join_all(reads).await) {
            assert_eq!(r.unwrap().0, k.as_bytes());
        }
        let big = vec![7u8; 200 << 10];
        c.write(t, b"big", &big).await.unwrap();
        assert_eq!(c.read(t, b"big").await.unwrap().0, big);
    });
}

/// Awaits every future, all polled concurrently (on one task).
async fn futures_join_all<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in fs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in set.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|v| v.expect("ready")).collect()
}

#[test]
fn mutual_tls_refuses_clients_without_the_right_certificate() {
    let pki = Pki::new("mutual");
    let other = Pki::new("mutual-other");
    let (_server, addr) = start(&pki, true);
    let refused = |tls: ClientTls| {
        let r = blocking::Client::with_config(addr, config(Some(tls))).and_then(|mut c| c.ping());
        r.expect_err("refused").to_string()
    };
    let e = refused(pki.client(false));
    assert!(e.contains("TLS handshake failed") && e.contains("CertificateRequired"), "no certificate: {e}");
    let foreign =
        ClientTls::new(Some(&pki.1.ca), Some((other.1.client_cert.as_path(), other.1.client_key.as_path()))).unwrap();
    let e = refused(foreign);
    assert!(e.contains("received fatal alert"), "another CA's certificate: {e}");
    // A server certificate from another CA is refused by the client.
    let e = refused(other.client(true));
    assert!(e.contains("TLS handshake failed: invalid peer certificate"), "{e}");
    // And a name the certificate does not carry.
    let e = refused(pki.client(true).with_server_name("elsewhere.example").unwrap());
    assert!(e.contains("not valid for name"), "{e}");
    let mut c = blocking::Client::with_config(addr, config(Some(pki.client(true)))).unwrap();
    c.ping().unwrap();
    let mut c =
        blocking::Client::with_config(addr, config(Some(pki.client(true).with_server_name("localhost").unwrap())))
            .unwrap();
    c.ping().unwrap();
}

#[test]
fn a_clear_text_client_on_a_tls_port_gets_ping_only() {
    let pki = Pki::new("plain");
    let (_server, addr) = start(&pki, true);
    let mut c = blocking::Client::with_config(addr, config(None)).unwrap();
    c.ping().expect("PING answers in clear text (failure detection)");
    let e = c.create_table("t").expect_err("nothing else");
    assert!(e.to_string().contains("TLS"), "{e}");
    // The server goes on serving TLS clients.
    let mut tls = blocking::Client::with_config(addr, config(Some(pki.client(true)))).unwrap();
    tls.create_table("t").unwrap();
}
