//! The admin API, on its own listener (loopback by default): what operators, the CLI, the
//! demo and the tests look at, and the few actions an operator takes. `api-spec/admin-api.yaml`
//! is the contract.
//!
//! Every route but `/healthz` requires the bearer token of `[admin] token_file` when one is
//! configured (it must be, off loopback): `auth.rs`, a route layer.
//!
//! - views (`views.rs`): `GET /status`, `/pools`, `/machines`, `/jobs`, `/jobs/{id}`,
//!   `/waits`, `/decisions`, `/metrics`, `/healthz`;
//! - the status page (`page.rs`): `GET /` and `/ui`, a shell without data, open like
//!   `/healthz`, whose script reads the views above with the token;
//! - actions (`actions.rs`): `POST /machines/{id}/drain`, `/machines/{id}/destroy`,
//!   `/pools/{name}/pause`, `/pools/{name}/resume`.

mod actions;
mod auth;
mod book;
mod page;
mod timeline;
mod views;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::http::Method;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::decisions::Decisions;
use crate::jobs::Jobs;
use crate::machines::PoolMachines;
use crate::metrics::Metrics;
use crate::pools::Pool;
use crate::routes::Routes;
use crate::secret::Secret;

pub use timeline::{JobDetail, Step};
pub use views::{JobView, Status};

#[derive(Debug)]
pub struct Admin {
    pub pools: Vec<Arc<Pool>>,
    pub machines: HashMap<String, Arc<PoolMachines>>,
    pub jobs: Arc<Jobs>,
    /// Cancelled when a graceful shutdown begins.
    pub draining: tokio_util::sync::CancellationToken,
    pub metrics: Arc<Metrics>,
    pub decisions: Arc<Decisions>,
    /// The configuration's generation and last reload.
    pub reloads: Arc<crate::reload::Reloads>,
    /// The bearer token requests must carry, when configured.
    pub token: Option<Secret>,
    /// The built book served at `/book/` (`[admin] book_dir`), when configured.
    pub book_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub intake: String,
    pub jobs: BTreeMap<String, usize>,
    pub machines: BTreeMap<String, usize>,
    /// `closed`, or why the provisioner is paused and until when (ms since the epoch).
    pub provisioner: Option<BreakerView>,
    /// How long the pool's last reconcile and machine pass took (pools with a provisioner).
    #[serde(default)]
    pub timings: Option<crate::machines::PassTimings>,
    /// Why GitLab refuses the pool's job requests (`403 …`, `422 Runner is orphaned`): the
    /// pool takes no jobs until it stops.
    #[serde(default)]
    pub paused: Option<String>,
    /// An operator paused the pool (`POST /pools/{name}/pause`): it takes no jobs until resumed.
    #[serde(default)]
    pub paused_by_operator: bool,
    /// Job requests of the pool's sidecars held open right now (sidecars ready for a job).
    #[serde(default)]
    pub requests_waiting: usize,
    /// The p95 wait the pool's planner aims at (`target_wait` in force; only for a
    /// demand-aware pool that makes machines).
    #[serde(default)]
    pub target_wait_seconds: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerView {
    Closed,
    Open { until: u64, reason: String },
    HalfOpen { reason: String },
}

/// Why an admin request was refused; each maps to one status, with `{"error": message}`.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{kind} {name:?} does not exist")]
    NotFound { kind: &'static str, name: String },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Internal(String),
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let status = match &self {
            AdminError::NotFound { .. } => StatusCode::NOT_FOUND,
            AdminError::Conflict(_) => StatusCode::CONFLICT,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(error = %self, "admin request failed");
        } else {
            tracing::info!(error = %self, status = status.as_u16(), "admin request refused");
        }
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

impl Admin {
    fn pool(&self, name: &str) -> Result<&Arc<Pool>, AdminError> {
        self.pools
            .iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| AdminError::NotFound {
                kind: "pool",
                name: name.to_string(),
            })
    }

    /// The machine `id` and its pool's machine service.
    fn machine(
        &self,
        id: &str,
    ) -> Result<(&Arc<PoolMachines>, crate::store::MachineRecord), AdminError> {
        self.machines
            .values()
            .find_map(|m| m.get(id).map(|r| (m, r)))
            .ok_or_else(|| AdminError::NotFound {
                kind: "machine",
                name: id.to_string(),
            })
    }
}

/// Every route that requires the token (`auth.rs`).
fn guarded_routes() -> Routes<Arc<Admin>> {
    Routes::default()
        .add(Method::GET, "/status", views::status)
        .add(Method::GET, "/pools", views::pools)
        .add(Method::GET, "/machines", views::machines)
        .add(Method::GET, "/jobs", views::jobs)
        .add(Method::GET, "/jobs/{id}", views::job)
        .add(Method::GET, "/waits", views::waits)
        .add(Method::GET, "/decisions", views::decisions)
        .add(Method::GET, "/metrics", views::metrics)
        .add(Method::POST, "/machines/{id}/drain", actions::drain)
        .add(Method::POST, "/machines/{id}/destroy", actions::destroy)
        .add(Method::POST, "/pools/{name}/pause", actions::pause)
        .add(Method::POST, "/pools/{name}/resume", actions::resume)
}

/// The routes open without the token: liveness, the status page's shell and the book (no
/// data).
fn open_routes(routes: Routes<Arc<Admin>>) -> Routes<Arc<Admin>> {
    book::routes(page::routes(routes.add(
        Method::GET,
        "/healthz",
        views::healthz,
    )))
}

/// Every route of the admin API; `api-spec/admin-api.yaml` documents each one (tested).
pub fn route_table() -> Routes<Arc<Admin>> {
    open_routes(guarded_routes())
}

pub fn router(admin: Arc<Admin>) -> axum::Router {
    let guarded = guarded_routes()
        .into_router()
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            auth::require_token,
        ));
    open_routes(Routes::default())
        .into_router()
        .merge(guarded)
        .with_state(admin)
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|r: &axum::http::Request<_>| {
                    tracing::info_span!("admin_request", method = %r.method(), path = %r.uri().path())
                })
                .on_failure(()),
        )
}
