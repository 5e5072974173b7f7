//! The control API (`/control/*`, README "Control API"): how a test drives the fake. Never
//! affected by faults. The typed client is [`Client`]; the JSON types are shared with it.

mod client;
mod types;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

pub use client::{Client, ClientError};
pub use types::{
    ArtifactSpec, ArtifactView, CancelOutcome, CreatedPipeline, CreatedSchedule, EnqueuedJob,
    FaultAction, FaultId, FaultRule, JobBatch, JobSpec, JobStatus, JobVariable, JobView,
    NewApiToken, NewPipeline, NewRunner, RunnerView, ScheduleSpec, Stats, WaitFor,
};

use crate::api::file_response;
use crate::shared::{Shared, Waited};

/// How long `?wait=` holds when no `timeout_ms` is given.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/control/runners", post(add_runner).get(list_runners))
        .route("/control/runners/{token}", get(runner))
        .route("/control/registration_tokens", post(add_registration_token))
        .route("/control/api_tokens", post(add_api_token))
        .route("/control/runners/{token}/orphaned", post(set_orphaned))
        .route("/control/jobs", post(enqueue).get(list_jobs))
        .route("/control/jobs/batch", post(enqueue_batch))
        .route("/control/pipelines", post(create_pipeline))
        .route("/control/pipeline_schedules", post(add_schedule))
        .route("/control/jobs/{id}", get(job))
        .route("/control/jobs/{id}/trace", get(trace))
        .route(
            "/control/jobs/{id}/artifacts/{artifact_type}",
            get(artifact),
        )
        .route("/control/jobs/{id}/cancel", post(cancel))
        .route("/control/faults", post(add_fault).delete(clear_faults))
        .route("/control/faults/{id}", delete(remove_fault))
        .route("/control/stats", get(stats))
}

fn error(status: StatusCode, text: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": text.to_string() }))).into_response()
}

fn unknown_job(id: u64) -> Response {
    error(StatusCode::NOT_FOUND, format!("no job {id}"))
}

/// JSON bodies, parsed by hand so a bad one gets the README's `{"error": …}` answer.
fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, serde_json::Error> {
    serde_json::from_slice(body)
}

async fn add_runner(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let new: NewRunner = match parse(&body) {
        Ok(new) => new,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if new.token.is_empty() {
        return error(StatusCode::BAD_REQUEST, "token is missing");
    }
    let view = shared.mutate(|s| s.add_runner(&new.token));
    (StatusCode::CREATED, Json(view)).into_response()
}

/// `POST /control/registration_tokens` `{"token": "..."}`: `POST /api/v4/runners` accepts it.
async fn add_registration_token(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let new: NewRunner = match parse(&body) {
        Ok(new) => new,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if new.token.is_empty() {
        return error(StatusCode::BAD_REQUEST, "token is missing");
    }
    shared.mutate(|s| s.add_registration_token(&new.token));
    (StatusCode::CREATED, Json(json!({ "token": new.token }))).into_response()
}

/// `POST /control/api_tokens` `{"token": "...", "scopes": ["read_api"], "name": "..."}`: an
/// access token the REST API (`/api/v4/runners/:id/jobs`, `/api/v4/projects/:id/pipelines/
/// :pipeline_id/jobs`, `/api/v4/personal_access_tokens/self`) accepts, with its scopes.
async fn add_api_token(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let new: NewApiToken = match parse(&body) {
        Ok(new) => new,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if new.token.is_empty() {
        return error(StatusCode::BAD_REQUEST, "token is missing");
    }
    let now = std::time::SystemTime::now();
    shared.mutate(|s| s.add_api_token(&new.token, new.name.as_deref(), &new.scopes, now));
    (StatusCode::CREATED, Json(json!({ "token": new.token }))).into_response()
}

async fn list_runners(State(shared): State<Arc<Shared>>) -> Json<Vec<RunnerView>> {
    Json(shared.read(|s| s.runner_views()))
}

#[derive(Debug, Deserialize)]
struct RunnerQuery {
    #[serde(default)]
    min_requests: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `GET /control/runners/:token[?min_requests=N&timeout_ms=T]`: with `min_requests`, held until
/// that many job requests arrived (so a test knows a long poll is being held), else `408`.
async fn runner(
    State(shared): State<Arc<Shared>>,
    Path(token): Path<String>,
    Query(query): Query<RunnerQuery>,
) -> Response {
    let unknown = || error(StatusCode::NOT_FOUND, "unknown runner token");
    if shared.read(|s| s.runner_view(&token)).is_none() {
        return unknown();
    }
    let code = match query.min_requests {
        None => StatusCode::OK,
        Some(min) => {
            let timeout = query.timeout_ms.map_or(DEFAULT_WAIT, Duration::from_millis);
            let waited = shared
                .wait_for(timeout, |s| {
                    s.runner_view(&token)
                        .is_none_or(|view| view.requests >= min)
                        .then_some(())
                })
                .await;
            wait_status(&waited)
        }
    };
    match shared.read(|s| s.runner_view(&token)) {
        Some(view) => (code, Json(view)).into_response(),
        None => unknown(),
    }
}

/// `POST /control/runners/:token/orphaned` `{"status": 403 | 422 | null}`: the runner's
/// job requests and verify calls are answered as GitLab answers an orphaned runner.
async fn set_orphaned(
    State(shared): State<Arc<Shared>>,
    Path(token): Path<String>,
    body: Bytes,
) -> Response {
    #[derive(serde::Deserialize)]
    struct Orphaned {
        status: Option<u16>,
    }
    let orphaned: Orphaned = match parse(&body) {
        Ok(orphaned) => orphaned,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Some(status) = orphaned.status.filter(|s| ![403, 422].contains(s)) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("status {status}: GitLab answers an orphaned runner with 403 or 422"),
        );
    }
    if shared.mutate(|s| s.set_orphaned(&token, orphaned.status)) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        error(StatusCode::NOT_FOUND, "unknown runner token")
    }
}

fn wait_status(waited: &Waited<()>) -> StatusCode {
    match waited {
        Waited::Ready(()) => StatusCode::OK,
        Waited::TimedOut => StatusCode::REQUEST_TIMEOUT,
        Waited::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn enqueue(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let spec: JobSpec = match parse(&body) {
        Ok(spec) => spec,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match shared.mutate(|s| s.enqueue(spec, Instant::now())) {
        Ok(job) => {
            tracing::info!(job.id = job.id, "job enqueued");
            (StatusCode::CREATED, Json(job)).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// `POST /control/pipelines` `{"stages": [[JobSpec, ...], ...]}`: a pipeline run by stages as
/// GitLab runs them (the first stage pending, the next ones `created` until the one before
/// succeeds, skipped if it fails).
async fn create_pipeline(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let new: NewPipeline = match parse(&body) {
        Ok(new) => new,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match shared.mutate(|s| s.create_pipeline(new.stages, Instant::now())) {
        Ok((id, stages)) => {
            tracing::info!(pipeline.id = id, stages = stages.len(), "pipeline created");
            (StatusCode::CREATED, Json(CreatedPipeline { id, stages })).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// `POST /control/pipeline_schedules` (a [`ScheduleSpec`]): a schedule that
/// `GET /api/v4/projects/:id/pipeline_schedules` lists. `next_run_at` must be an RFC 3339 time.
async fn add_schedule(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let spec: ScheduleSpec = match parse(&body) {
        Ok(spec) => spec,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if chrono::DateTime::parse_from_rfc3339(&spec.next_run_at).is_err() {
        return error(
            StatusCode::BAD_REQUEST,
            "next_run_at is not an RFC 3339 time",
        );
    }
    let id = shared.mutate(|s| s.add_schedule(spec, std::time::SystemTime::now()));
    (StatusCode::CREATED, Json(CreatedSchedule { id })).into_response()
}

/// `POST /control/jobs/batch` `{"spec": JobSpec, "count": N}`: N copies in one call, for load
/// tests that need thousands of jobs queued at once.
async fn enqueue_batch(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let batch: JobBatch = match parse(&body) {
        Ok(batch) => batch,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if batch.count == 0 || batch.count > 100_000 {
        return error(StatusCode::BAD_REQUEST, "count must be 1 to 100000");
    }
    let now = Instant::now();
    let result = shared.mutate(|s| {
        (0..batch.count)
            .map(|_| s.enqueue(batch.spec.clone(), now))
            .collect::<Result<Vec<_>, _>>()
    });
    match result {
        Ok(jobs) => {
            tracing::info!(jobs = jobs.len(), "jobs enqueued");
            (StatusCode::CREATED, Json(jobs)).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

async fn list_jobs(State(shared): State<Arc<Shared>>) -> Json<Vec<JobView>> {
    Json(shared.read(|s| s.job_views()))
}

#[derive(Debug, Deserialize)]
struct WaitQuery {
    #[serde(default)]
    wait: Option<WaitFor>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `GET /control/jobs/:id[?wait=running|final&timeout_ms=N]`: `408` with the view on timeout.
async fn job(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u64>,
    Query(query): Query<WaitQuery>,
) -> Response {
    if shared.read(|s| s.job_status(id)).is_none() {
        return unknown_job(id);
    }
    let code = match query.wait {
        None => StatusCode::OK,
        Some(wait) => {
            let timeout = query.timeout_ms.map_or(DEFAULT_WAIT, Duration::from_millis);
            let waited = shared
                .wait_for(timeout, |s| {
                    s.job_status(id)
                        .is_none_or(|status| wait.is_reached(status))
                        .then_some(())
                })
                .await;
            wait_status(&waited)
        }
    };
    match shared.read(|s| s.job_view(id)) {
        Some(view) => (code, Json(view)).into_response(),
        None => unknown_job(id),
    }
}

async fn trace(State(shared): State<Arc<Shared>>, Path(id): Path<u64>) -> Response {
    match shared.read(|s| s.trace(id)) {
        Some(bytes) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; charset=utf-8",
            )],
            bytes,
        )
            .into_response(),
        None => unknown_job(id),
    }
}

async fn artifact(
    State(shared): State<Arc<Shared>>,
    Path((id, artifact_type)): Path<(u64, String)>,
) -> Response {
    match shared.read(|s| s.artifact(id, &artifact_type)) {
        Some(artifact) => file_response(&artifact).await,
        None => error(
            StatusCode::NOT_FOUND,
            format!("job {id} has no {artifact_type} artifact"),
        ),
    }
}

/// Body of `POST /control/jobs/:id/cancel` (optional).
#[derive(serde::Deserialize, Default)]
struct CancelRequest {
    #[serde(default)]
    force: bool,
}

async fn cancel(State(shared): State<Arc<Shared>>, Path(id): Path<u64>, body: Bytes) -> Response {
    let request: CancelRequest = if body.is_empty() {
        CancelRequest::default()
    } else {
        match parse(&body) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        }
    };
    match shared.mutate(|s| s.cancel(id, request.force)) {
        Some(status) => {
            tracing::info!(job.id = id, %status, "cancel requested");
            Json(CancelOutcome { status }).into_response()
        }
        None => unknown_job(id),
    }
}

async fn add_fault(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let rule: FaultRule = match parse(&body) {
        Ok(rule) => rule,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let FaultAction::Status { status, .. } = rule.action
        && StatusCode::from_u16(status).is_err()
    {
        return error(StatusCode::BAD_REQUEST, format!("invalid status {status}"));
    }
    tracing::info!(?rule, "fault added");
    let id = shared.faults.add(rule, Instant::now());
    (StatusCode::CREATED, Json(FaultId { id })).into_response()
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.faults.clear();
    StatusCode::NO_CONTENT
}

async fn remove_fault(State(shared): State<Arc<Shared>>, Path(id): Path<u64>) -> StatusCode {
    shared.faults.remove(id);
    StatusCode::NO_CONTENT
}

async fn stats(State(shared): State<Arc<Shared>>) -> Json<Stats> {
    Json(shared.stats.snapshot())
}
