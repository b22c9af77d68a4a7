//! The coordinator's HTTP listener (`--metrics-port`): the router and its
//! listener, within the bounds of `shoal_http::listener`. Routes:
//! `/metrics` (`metrics.rs`).

use crate::metrics::CoordinatorMetrics;
use crate::service::Service;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use shoal_http::prom;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The routes.
pub(crate) fn router(service: Arc<Service>) -> Router {
    Router::new().route("/metrics", get(move |headers: HeaderMap| metrics(service.clone(), accept(&headers))))
}

/// Serves `router` on `listener` until `shutdown` turns true.
pub(crate) async fn serve(listener: TcpListener, service: Arc<Service>, shutdown: watch::Receiver<bool>) {
    shoal_http::serve(listener, router(service), shoal_http::Limits::default(), shutdown).await
}

/// The `Accept` header, if any (it picks the text format).
fn accept(headers: &HeaderMap) -> Option<String> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

async fn metrics(service: Arc<Service>, accept: Option<String>) -> Response {
    match prom::render_for(accept.as_deref(), CoordinatorMetrics { service }) {
        Ok((kind, text)) => ([(header::CONTENT_TYPE, kind)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics\n").into_response(),
    }
}
