//! The coordinator's one HTTP listener (`--metrics-port`): its routes and
//! their start, served by `shoal_http`'s bounded listener (the one every
//! server's `/metrics` uses too: connection cap, header bounds, GET and
//! HEAD only, no request bodies, no-store/nosniff/CSP headers). Routes:
//! * `/metrics` (`metrics.rs`), read from the service at scrape time;
//! * the dashboard (`dashboard/`): `/`, `/dashboard.js`, `/dashboard.css`,
//!   `/api/cluster`, `/api/history`, fed by the [`Sampler`] started here.

use crate::config::CoordinatorError;
use crate::dashboard::{self, Dashboard};
use crate::metrics::CoordinatorMetrics;
use crate::sampler::Sampler;
use crate::service::Service;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use shoal_http::prom;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Every route: `/metrics` and the dashboard's.
pub(crate) fn router(dashboard: Dashboard) -> Router {
    let service = dashboard.service.clone();
    Router::new()
        .route("/metrics", get(move |headers: HeaderMap| metrics(service.clone(), accept(&headers))))
        .merge(dashboard::routes(dashboard))
}

/// Binds `at`, starts the dashboard's sampler and serves the routes in the
/// background until `shutdown` turns true. The bound address (port 0
/// picks a free one). `control`: the control protocol's address, shown on
/// the dashboard.
pub(crate) async fn start(
    at: SocketAddr,
    control: SocketAddr,
    service: &Arc<Service>,
    shutdown: &watch::Sender<bool>,
) -> Result<SocketAddr, CoordinatorError> {
    let listener = TcpListener::bind(at).await.map_err(|source| CoordinatorError::Bind { addr: at, source })?;
    let bound = listener.local_addr().map_err(|source| CoordinatorError::Bind { addr: at, source })?;
    let sampler = Arc::new(Sampler::default());
    tokio::spawn(sampler.clone().run(service.map_watch(), shutdown.subscribe()));
    let routes = router(Dashboard { service: service.clone(), sampler, control });
    tokio::spawn(shoal_http::serve(listener, routes, shoal_http::Limits::default(), shutdown.subscribe()));
    Ok(bound)
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
