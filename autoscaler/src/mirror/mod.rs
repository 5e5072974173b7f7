//! The mirrored runner API: GitLab's runner endpoints, served to sidecars (runner-protocol.md).
//!
//! Runner-token endpoints (`/runners/*`, `/jobs/request`) are answered here from the
//! autoscaler's own state; job-token endpoints (`PUT /jobs/:id`, trace, artifacts) are checked
//! against the jobs we hold and then relayed to GitLab with their status and headers.

mod binding;
mod body;
mod error;
mod job_request;
mod long_polls;
mod params;
mod relay;
mod runners;
mod sidecar_binary;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, Request};
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::config::Config;
use crate::delivery::Delivery;
use crate::jobs::Jobs;
use crate::machines::PoolMachines;
use crate::metrics::{self, Metrics};
use crate::pools::Pool;
use crate::routes::Routes;
use crate::secret::TokenDigest;
use crate::sidecars::Sidecars;
use crate::upstream::Upstream;

/// Everything the handlers share.
#[derive(Debug)]
pub struct App {
    pub pools: HashMap<String, Arc<Pool>>,
    pub jobs: Arc<Jobs>,
    pub sidecars: Arc<Sidecars>,
    pub upstream: Arc<dyn Upstream>,
    pub delivery: Arc<Delivery>,
    pub limits: Limits,
    /// The job requests each sidecar token holds open.
    long_polls: Arc<long_polls::LongPolls>,
    /// Machine tokens refused for their source address, logged once each.
    refusals: binding::Refusals,
    /// The machines of each pool that has a provisioner.
    pub machines: HashMap<String, Arc<PoolMachines>>,
    /// Registration token digest → pool name.
    registration: HashMap<TokenDigest, String>,
    pub metrics: Arc<Metrics>,
    /// Sidecar binaries machines fetch at boot (pools that start sidecars from user-data),
    /// by SHA-256.
    sidecar_binaries: HashMap<String, std::path::PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub long_poll: Duration,
    pub job_request_bytes: u64,
    pub update_bytes: u64,
    pub trace_patch_bytes: u64,
    pub call_timeout: Duration,
    pub artifact_timeout: Duration,
    /// Job requests one sidecar token may hold open at once.
    pub job_requests_per_sidecar: usize,
}

impl Limits {
    pub fn from_config(config: &Config) -> Self {
        Self {
            long_poll: config.server.long_poll_timeout,
            // Workhorse reads at most 32 KiB of a job request (runner-protocol.md §3.1).
            job_request_bytes: 32 * 1024,
            update_bytes: config.server.max_update_bytes,
            trace_patch_bytes: config.server.max_trace_patch_bytes,
            call_timeout: config.upstream.call_timeout,
            artifact_timeout: config.upstream.artifact_timeout,
            job_requests_per_sidecar: config.server.connections.max_job_requests_per_sidecar,
        }
    }
}

impl App {
    pub fn new(
        pools: Vec<Arc<Pool>>,
        jobs: Arc<Jobs>,
        sidecars: Arc<Sidecars>,
        upstream: Arc<dyn Upstream>,
        delivery: Arc<Delivery>,
        limits: Limits,
    ) -> Self {
        let registration = pools
            .iter()
            .filter_map(|p| {
                let token = p.config.registration_token.as_ref()?;
                Some((token.digest(), p.name().to_string()))
            })
            .collect();
        Self {
            pools: pools
                .into_iter()
                .map(|p| (p.name().to_string(), p))
                .collect(),
            jobs,
            sidecars,
            upstream,
            delivery,
            long_polls: long_polls::LongPolls::new(limits.job_requests_per_sidecar),
            refusals: binding::Refusals::default(),
            limits,
            machines: HashMap::new(),
            registration,
            metrics: Arc::new(Metrics::new()),
            sidecar_binaries: HashMap::new(),
        }
    }

    /// Records the mirrored API's requests in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Serves these sidecar binaries (SHA-256 → file) to machines that fetch their own.
    pub fn with_sidecar_binaries(mut self, binaries: HashMap<String, std::path::PathBuf>) -> Self {
        self.sidecar_binaries = binaries;
        self
    }

    /// Adds the machine service of a pool (pools with a provisioner).
    pub fn with_machines(mut self, machines: HashMap<String, Arc<PoolMachines>>) -> Self {
        self.machines = machines;
        self
    }

    fn pool(&self, name: &str) -> Result<&Arc<Pool>, ApiError> {
        self.pools
            .get(name)
            .ok_or_else(|| ApiError::Internal(format!("pool {name:?} is not configured")))
    }

    fn pool_for_registration(&self, token: &str) -> Option<&str> {
        self.registration
            .get(&TokenDigest::of(token))
            .map(String::as_str)
    }
}

pub fn router(app: Arc<App>) -> Router {
    // Grape ignores a trailing slash (`POST /api/v4/runners/`): so does the mirrored API.
    let routes = tower::ServiceExt::map_request(routes(app), trim_trailing_slash);
    Router::new()
        .fallback_service(routes)
        // Failures are logged once, with their reason, by `ApiError`; the layer only makes spans.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(()),
        )
}

/// `/api/v4/runners/` → `/api/v4/runners`, the query kept.
fn trim_trailing_slash<B>(mut request: Request<B>) -> Request<B> {
    let uri = request.uri();
    let path = uri.path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let trimmed = if trimmed.is_empty() { "/" } else { trimmed };
        let rebuilt = match uri.query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        if let Ok(new) = rebuilt.parse() {
            *request.uri_mut() = new;
        }
    }
    request
}

/// Every route of the mirrored API; `api-spec/runner-api.yaml` documents each one (tested).
pub fn route_table() -> Routes<Arc<App>> {
    Routes::default()
        .add(Method::POST, "/api/v4/runners", runners::register)
        .add(Method::DELETE, "/api/v4/runners", runners::unregister)
        .add(Method::POST, "/api/v4/runners/verify", runners::verify)
        .add(
            Method::DELETE,
            "/api/v4/runners/managers",
            runners::unregister_manager,
        )
        .add(
            Method::POST,
            "/api/v4/runners/reset_authentication_token",
            runners::reset_token,
        )
        .add(
            Method::GET,
            "/api/v4/runners/router/discovery",
            runners::router_discovery,
        )
        .add(
            Method::POST,
            "/api/v4/jobs/request",
            job_request::request_job,
        )
        .add(Method::PUT, "/api/v4/jobs/{id}", relay::update_job)
        .add(Method::PATCH, "/api/v4/jobs/{id}/trace", relay::patch_trace)
        .add(
            Method::POST,
            "/api/v4/jobs/{id}/artifacts",
            relay::upload_artifacts,
        )
        .add(
            Method::GET,
            "/api/v4/jobs/{id}/artifacts",
            relay::download_artifacts,
        )
        .add(
            Method::GET,
            "/autoscaler/v1/sidecar-binary/{sha256}",
            sidecar_binary::download,
        )
}

fn routes(app: Arc<App>) -> Router {
    let timing = axum::middleware::from_fn_with_state(app.metrics.clone(), metrics::record_request);
    route_table()
        .into_router()
        .route_layer(timing)
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(app)
}

fn request_span<B>(request: &Request<B>) -> tracing::Span {
    let request_id = body::request_id(request.headers()).unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
        sidecar.id = tracing::field::Empty,
        machine.id = tracing::field::Empty,
        pool = tracing::field::Empty,
        job.id = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests;
