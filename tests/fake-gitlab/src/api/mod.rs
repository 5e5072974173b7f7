//! GitLab's runner API (`/api/v4/*`), the side a stock gitlab-runner talks to (runner-protocol.md).

mod artifacts;
mod jobs;
mod params;
mod rest;
mod runners;
mod trace;

pub(crate) use artifacts::file_response;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::json;

use crate::control::JobStatus;
use crate::shared::Shared;

/// Header names GitLab uses (runner-protocol.md §1, §4, §5).
pub(crate) const RUNNER_TOKEN: HeaderName = HeaderName::from_static("runner-token");
pub(crate) const JOB_TOKEN: HeaderName = HeaderName::from_static("job-token");
pub(crate) const JOB_STATUS: HeaderName = HeaderName::from_static("job-status");
pub(crate) const LAST_UPDATE: HeaderName = HeaderName::from_static("x-gitlab-last-update");
pub(crate) const TRACE_UPDATE_INTERVAL: HeaderName =
    HeaderName::from_static("x-gitlab-trace-update-interval");

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v4/runners/verify", post(runners::verify))
        .route(
            "/api/v4/runners",
            post(runners::register).delete(runners::unregister),
        )
        .route(
            "/api/v4/runners/managers",
            delete(runners::unregister_manager),
        )
        .route(
            "/api/v4/runners/router/discovery",
            get(runners::router_discovery),
        )
        .route("/api/v4/runners/{id}/jobs", get(rest::runner_jobs))
        .route(
            "/api/v4/projects/{id}/pipelines/{pipeline_id}/jobs",
            get(rest::pipeline_jobs),
        )
        .route(
            "/api/v4/projects/{id}/pipeline_schedules",
            get(rest::pipeline_schedules),
        )
        .route("/api/v4/personal_access_tokens/self", get(rest::token_self))
        .route("/api/v4/jobs/request", post(jobs::request))
        .route("/api/v4/jobs/{id}", put(jobs::update))
        .route("/api/v4/jobs/{id}/trace", patch(trace::append))
        .route(
            "/api/v4/jobs/{id}/artifacts",
            post(artifacts::upload).get(artifacts::download),
        )
        .route("/storage/{key}", get(artifacts::storage))
}

/// Grape's error body: `{"message": "..."}`.
pub(crate) fn message(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "message": text }))).into_response()
}

pub(crate) fn not_found() -> Response {
    message(StatusCode::NOT_FOUND, "404 Not found")
}

pub(crate) fn forbidden() -> Response {
    message(StatusCode::FORBIDDEN, "403 Forbidden")
}

/// GitLab's answer to an orphaned runner (no project or group left): `403 Forbidden - Runner
/// is orphaned` with `reject_orphaned_runners` on, else `422 Runner is orphaned`
/// (runner-protocol.md §2).
pub(crate) fn orphaned(status: u16) -> Response {
    if status == 403 {
        message(StatusCode::FORBIDDEN, "403 Forbidden - Runner is orphaned")
    } else {
        message(StatusCode::UNPROCESSABLE_ENTITY, "Runner is orphaned")
    }
}

/// Adds `Job-Status` (GitLab's name for the state: `waiting_for_ack` reads `pending`).
pub(crate) fn with_job_status(mut response: Response, status: JobStatus) -> Response {
    response
        .headers_mut()
        .insert(JOB_STATUS, HeaderValue::from_static(status.as_gitlab_str()));
    response
}

/// `403` for a job that is not running, with its `Job-Status` so the runner aborts (§4, §6).
pub(crate) fn not_processing(status: JobStatus) -> Response {
    with_job_status(
        message(
            StatusCode::FORBIDDEN,
            "403 Forbidden - Job is not processing",
        ),
        status,
    )
}

pub(crate) fn with_header(mut response: Response, name: HeaderName, value: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
    response
}

pub(crate) fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .filter(|value| !value.is_empty())
}

/// Job ids are numbers; anything else cannot name a job.
pub(crate) fn parse_id(raw: &str) -> Option<u64> {
    raw.parse().ok()
}

/// The configured update interval in whole seconds (the runner ignores values ≤ 0).
pub(crate) fn update_interval_secs(shared: &Shared) -> String {
    shared
        .config
        .trace_update_interval
        .as_secs()
        .max(1)
        .to_string()
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadBodyError {
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    #[error("reading the request body failed: {0}")]
    Broken(#[from] axum::Error),
}

/// Reads a whole body of at most `limit` bytes (refusing early on a larger `Content-Length`).
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ReadBodyError> {
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(ReadBodyError::TooLarge(limit));
    }
    let mut stream = body.into_data_stream();
    let mut buffer = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if buffer.len() + chunk.len() > limit {
            return Err(ReadBodyError::TooLarge(limit));
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
}
