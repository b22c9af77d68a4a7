//! The server's HTTP listener (`--metrics-port`): `/metrics` in the
//! Prometheus text format, or OpenMetrics when the scraper asks for it
//! (`metrics`, `docs/observability.md`). It runs
//! on the server's own thread beside the client listeners, within the
//! bounds of `shoal_http::listener`; a scrape is encoded on the runtime's
//! blocking pool, one at a time, never on a worker.

use crate::context::ServerContext;
use crate::metrics::ServerMetrics;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use shoal_http::prom;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// The routes: `/metrics`.
pub fn router(ctx: Arc<ServerContext>) -> Router {
    let one_at_a_time = Arc::new(Semaphore::new(1));
    Router::new()
        .route("/metrics", get(move |headers: HeaderMap| metrics(ctx.clone(), one_at_a_time.clone(), accept(&headers))))
}

/// Serves `listener` (bound with `shoal_http::bind`) until the server shuts down.
pub async fn serve(ctx: Arc<ServerContext>, listener: tokio::net::TcpListener) {
    let shutdown = ctx.shutdown_signal();
    shoal_http::serve(listener, router(ctx), shoal_http::Limits::default(), shutdown).await
}

/// The `Accept` header, if any (it picks the text format).
fn accept(headers: &HeaderMap) -> Option<String> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

async fn metrics(ctx: Arc<ServerContext>, one_at_a_time: Arc<Semaphore>, accept: Option<String>) -> Response {
    let Ok(_turn) = one_at_a_time.acquire().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    match tokio::task::spawn_blocking(move || prom::render_for(accept.as_deref(), ServerMetrics::new(ctx))).await {
        Ok(Ok((kind, text))) => ([(header::CONTENT_TYPE, kind)], text).into_response(),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics\n").into_response(),
    }
}
