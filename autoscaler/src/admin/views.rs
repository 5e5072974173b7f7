//! What the admin API shows: the service, pools, machines, jobs, the planner's decisions, the
//! metrics, and whether the service still takes jobs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};

use super::{Admin, AdminError, BreakerView, PoolStatus};
use crate::core::breaker::BreakerState;
use crate::core::job::JobPhase;
use crate::decisions::Decision;
use crate::store::{JobRecord, MachineRecord};

/// `GET /status`: the service at a glance.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    /// A graceful shutdown began.
    pub draining: bool,
    pub machines: BTreeMap<String, usize>,
    pub jobs: BTreeMap<String, usize>,
    pub pools: Vec<PoolStatus>,
    /// The configuration in force: its generation and the last reload's outcome.
    #[serde(default)]
    pub config: crate::reload::ConfigStatus,
}

/// A job as the admin API shows it (never its token or payload).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub pool: String,
    pub phase: String,
    /// When GitLab handed it to the autoscaler (ms since the epoch).
    pub accepted_at: u64,
    /// The machine it was (last) handed to.
    #[serde(default)]
    pub machine: Option<String>,
    #[serde(default)]
    pub sidecar: Option<u64>,
    /// Why it failed, for a job the autoscaler fails upstream.
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PoolFilter {
    pool: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct MachineQuery {
    pool: Option<String>,
    /// Hold the answer until the machines changed since this version (see `X-Version`).
    after: Option<u64>,
    timeout_ms: Option<u64>,
}

/// Tells monitoring (and a deploy script waiting for the drain) whether the service still
/// takes jobs.
pub async fn healthz(State(admin): State<Arc<Admin>>) -> (StatusCode, &'static str) {
    if admin.draining.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    }
}

/// Prometheus scrapes this (OpenMetrics text; the book's metrics page lists every family).
pub async fn metrics(State(admin): State<Arc<Admin>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        admin.metrics.encode(),
    )
}

pub(super) fn pool_statuses(admin: &Admin) -> Vec<PoolStatus> {
    let by_phase = admin.jobs.phases_by_pool();
    admin
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
                intake: p.intake().name().to_string(),
                jobs: by_phase.get(p.name()).cloned().unwrap_or_default(),
                machines: counts,
                provisioner: machines.map(|m| match m.breaker() {
                    BreakerState::Closed => BreakerView::Closed,
                    BreakerState::Open { until, reason } => BreakerView::Open { until, reason },
                    BreakerState::HalfOpen { reason } => BreakerView::HalfOpen { reason },
                }),
                timings: machines.map(|m| m.timings()),
                paused: p.upstream_refusal(),
                paused_by_operator: p.paused_by_operator(),
                requests_waiting: p.queue.waiting(),
                target_wait_seconds: p.target_wait().map(|t| t.as_secs_f64()),
            }
        })
        .collect()
}

pub async fn pools(State(admin): State<Arc<Admin>>) -> Json<Vec<PoolStatus>> {
    Json(pool_statuses(&admin))
}

pub async fn status(State(admin): State<Arc<Admin>>) -> Json<Status> {
    let pools = pool_statuses(&admin);
    let total = |pick: fn(&PoolStatus) -> &BTreeMap<String, usize>| {
        let mut sum = BTreeMap::new();
        for (k, n) in pools.iter().flat_map(pick) {
            *sum.entry(k.clone()).or_insert(0) += n;
        }
        sum
    };
    Json(Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        draining: admin.draining.is_cancelled(),
        machines: total(|p| &p.machines),
        jobs: total(|p| &p.jobs),
        pools,
        config: admin.reloads.status(),
    })
}

/// The sum of every pool's machine version: grows with any change.
fn version(admin: &Admin) -> u64 {
    admin.machines.values().map(|m| m.version()).sum()
}

pub async fn machines(
    State(admin): State<Arc<Admin>>,
    Query(q): Query<MachineQuery>,
) -> impl IntoResponse {
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

pub(super) fn job_view(admin: &Admin, r: &JobRecord) -> JobView {
    let sidecar = match &r.phase {
        JobPhase::Assigned { sidecar, .. } => Some(*sidecar),
        JobPhase::Running { sidecar, .. } => *sidecar,
        _ => None,
    }
    // A job that ended keeps the sidecar it was last handed to in its timeline.
    .or_else(|| r.timeline.iter().rev().find_map(|s| s.sidecar));
    let machine = sidecar.and_then(|s| {
        admin
            .machines
            .get(&r.pool)
            .and_then(|m| m.by_sidecar(s))
            .map(|m| m.id)
    });
    JobView {
        id: r.id.0,
        pool: r.pool.clone(),
        phase: r.phase.name().to_string(),
        accepted_at: r.accepted_at,
        machine,
        sidecar: sidecar.map(|s| s.0),
        reason: match &r.phase {
            JobPhase::Failing { reason, .. } => Some(reason.clone()),
            _ => None,
        },
    }
}

pub async fn jobs(
    State(admin): State<Arc<Admin>>,
    Query(q): Query<PoolFilter>,
) -> Result<Json<Vec<JobView>>, AdminError> {
    if let Some(pool) = &q.pool {
        admin.pool(pool)?;
    }
    Ok(Json(
        admin
            .jobs
            .records()
            .iter()
            .filter(|r| q.pool.as_deref().is_none_or(|p| p == r.pool))
            .map(|r| job_view(&admin, r))
            .collect(),
    ))
}

pub async fn job(
    State(admin): State<Arc<Admin>>,
    Path(id): Path<String>,
) -> Result<Json<super::JobDetail>, AdminError> {
    let record = id
        .parse::<u64>()
        .ok()
        .and_then(|n| admin.jobs.get(crate::core::JobId(n)))
        .ok_or_else(|| AdminError::NotFound {
            kind: "job",
            name: id.clone(),
        })?;
    let view = job_view(&admin, &record);
    Ok(Json(super::timeline::detail(&admin, &record, view)))
}

/// `GET /decisions`: each pool's latest plan, and the recent ones that did something.
#[derive(Debug, Serialize, Deserialize)]
pub struct DecisionsView {
    pub latest: Vec<Decision>,
    pub history: Vec<Decision>,
}

pub async fn decisions(
    State(admin): State<Arc<Admin>>,
    Query(q): Query<PoolFilter>,
) -> Result<Json<DecisionsView>, AdminError> {
    if let Some(pool) = &q.pool {
        admin.pool(pool)?;
    }
    let (history, latest) = admin.decisions.recent(q.pool.as_deref());
    Ok(Json(DecisionsView { latest, history }))
}

/// `GET /waits`: how long the jobs started in the last hour waited for a sidecar (the status
/// page's chart; jobs still waiting are in `GET /jobs`).
pub async fn waits(
    State(admin): State<Arc<Admin>>,
    Query(q): Query<PoolFilter>,
) -> Result<Json<crate::jobs::RecentWaits>, AdminError> {
    if let Some(pool) = &q.pool {
        admin.pool(pool)?;
    }
    Ok(Json(admin.jobs.recent_waits(q.pool.as_deref())))
}
