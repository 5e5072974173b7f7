//! The admin API, on its own listener (loopback by default): what operators, the demo and the
//! tests look at. Read-only.
//!
//! - `GET /pools` — each pool: intake mode, machines by state, jobs by phase, the provisioner's
//!   circuit breaker.
//! - `GET /machines[?pool=NAME][&after=VERSION&timeout_ms=N]` — every machine with its state,
//!   reason and timeline; `X-Version` grows with every change, and `after` holds the answer
//!   until the machines changed past that version.
//! - `GET /healthz` — `200 ok` while the service runs, `503 draining` once shutdown began.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::Method;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::core::breaker::BreakerState;
use crate::jobs::Jobs;
use crate::machines::PoolMachines;
use crate::pools::Pool;
use crate::routes::Routes;
use crate::store::MachineRecord;

#[derive(Debug)]
pub struct Admin {
    pub pools: Vec<Arc<Pool>>,
    pub machines: HashMap<String, Arc<PoolMachines>>,
    pub jobs: Arc<Jobs>,
    /// Cancelled when a graceful shutdown begins.
    pub draining: tokio_util::sync::CancellationToken,
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
    /// Job requests of the pool's sidecars held open right now (sidecars ready for a job).
    #[serde(default)]
    pub requests_waiting: usize,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerView {
    Closed,
    Open { until: u64, reason: String },
    HalfOpen { reason: String },
}

#[derive(Debug, Deserialize)]
struct MachineQuery {
    pool: Option<String>,
    /// Hold the answer until the machines changed since this version (see `X-Version`).
    after: Option<u64>,
    timeout_ms: Option<u64>,
}

pub fn router(admin: Arc<Admin>) -> Router {
    route_table().into_router().with_state(admin)
}

/// Every route of the admin API; `api-spec/admin-api.yaml` documents each one (tested).
pub fn route_table() -> Routes<Arc<Admin>> {
    Routes::default()
        .add(Method::GET, "/healthz", healthz)
        .add(Method::GET, "/pools", pools)
        .add(Method::GET, "/machines", machines)
}

/// Tells monitoring (and a deploy script waiting for the drain) whether the service still
/// takes jobs.
async fn healthz(State(admin): State<Arc<Admin>>) -> (axum::http::StatusCode, &'static str) {
    if admin.draining.is_cancelled() {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (axum::http::StatusCode::OK, "ok")
    }
}

async fn pools(State(admin): State<Arc<Admin>>) -> Json<Vec<PoolStatus>> {
    let by_phase = admin.jobs.phases_by_pool();
    let list = admin
        .pools
        .iter()
        .map(|p| {
            let machines = admin.machines.get(p.name());
            let mut counts = BTreeMap::new();
            for m in machines.map(|m| m.snapshot()).unwrap_or_default() {
                *counts.entry(m.state.name().to_string()).or_insert(0) += 1;
            }
            PoolStatus {
                name: p.name().to_string(),
                intake: format!("{:?}", p.config.intake()).to_lowercase(),
                jobs: by_phase.get(p.name()).cloned().unwrap_or_default(),
                machines: counts,
                provisioner: machines.map(|m| match m.breaker() {
                    BreakerState::Closed => BreakerView::Closed,
                    BreakerState::Open { until, reason } => BreakerView::Open { until, reason },
                    BreakerState::HalfOpen { reason } => BreakerView::HalfOpen { reason },
                }),
                timings: machines.map(|m| m.timings()),
                paused: p.upstream_refusal(),
                requests_waiting: p.queue.waiting(),
            }
        })
        .collect();
    Json(list)
}

/// The sum of every pool's machine version: grows with any change.
fn version(admin: &Admin) -> u64 {
    admin.machines.values().map(|m| m.version()).sum()
}

async fn machines(
    State(admin): State<Arc<Admin>>,
    Query(q): Query<MachineQuery>,
) -> impl axum::response::IntoResponse {
    if let Some(after) = q.after {
        let deadline = crate::clock::monotonic()
            + std::time::Duration::from_millis(q.timeout_ms.unwrap_or(30_000).min(300_000));
        let mut watchers: Vec<_> = admin.machines.values().map(|m| m.subscribe()).collect();
        while version(&admin) <= after && !watchers.is_empty() {
            let changed =
                futures::future::select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
    }
    let current = version(&admin);
    let mut list: Vec<MachineRecord> = admin
        .machines
        .iter()
        .filter(|(pool, _)| q.pool.as_deref().is_none_or(|p| p == pool.as_str()))
        .flat_map(|(_, m)| m.snapshot())
        .collect();
    list.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    ([("x-version", current.to_string())], Json(list))
}
