//! The coordinator's one HTTP listener (`--metrics-port`): `/metrics` and
//! the dashboard on the same port, within `shoal_http`'s bounds.

use shoal_coordinator::{Coordinator, CoordinatorConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` raw and returns the whole answer (the request closes).
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

async fn get(addr: SocketAddr, path: &str) -> String {
    raw(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).await
}

#[tokio::test]
async fn one_listener_serves_metrics_and_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let config = CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        replicas: Some(0),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..CoordinatorConfig::default()
    };
    let coordinator = Coordinator::start(config).await.expect("coordinator starts");
    let http = coordinator.http_addr().expect("an HTTP listener");

    let metrics = get(http, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("shoal_cluster_map_version"), "{metrics}");
    let page = get(http, "/").await;
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("<title>Shoal cluster</title>"), "{page}");
    let cluster = get(http, "/api/cluster").await;
    assert!(cluster.starts_with("HTTP/1.1 200") && cluster.contains("\"servers\""), "{cluster}");
    for answer in [&metrics, &page, &cluster] {
        assert!(answer.to_ascii_lowercase().contains("x-content-type-options: nosniff"), "{answer}");
    }
    let post = raw(http, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi").await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert!(get(http, "/nothing").await.starts_with("HTTP/1.1 404"));

    coordinator.shutdown();
    coordinator.wait().await;
}
