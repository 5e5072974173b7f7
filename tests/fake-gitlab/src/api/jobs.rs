//! `POST /api/v4/jobs/request` (Workhorse long polling + Rails assignment, runner-protocol.md §3) and
//! `PUT /api/v4/jobs/:id` (§3.5, §4).

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::runners::token_missing;
use super::{
    JOB_TOKEN, LAST_UPDATE, RUNNER_TOKEN, TRACE_UPDATE_INTERVAL, forbidden, header_str, message,
    not_found, not_processing, parse_id, read_limited, update_interval_secs, with_header,
    with_job_status,
};
use crate::payload;
use crate::shared::Shared;
use crate::state::{JobRequest, JobUpdate, UpdateReply};

/// Workhorse reads at most 32 KiB of a job request (runner-protocol.md §3.1).
const JOB_REQUEST_BODY_LIMIT: usize = 32 << 10;
const UPDATE_BODY_LIMIT: usize = 1 << 20;
/// Workhorse marks the answers of a long-polling install.
const BUILDS_POLLING: HeaderName = HeaderName::from_static("gitlab-ci-builds-polling");

#[derive(Debug, Deserialize)]
struct JobRequestBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    system_id: Option<String>,
    #[serde(default)]
    last_update: Option<String>,
    #[serde(default)]
    info: Option<serde_json::Value>,
}

pub(super) async fn request(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut response = request_job(&shared, &headers, body).await;
    if !shared.config.long_poll.is_zero() {
        response
            .headers_mut()
            .insert(BUILDS_POLLING, HeaderValue::from_static("yes"));
    }
    response
}

async fn request_job(shared: &Arc<Shared>, headers: &HeaderMap, body: Body) -> Response {
    let bytes = match read_limited(headers, body, JOB_REQUEST_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(super::ReadBodyError::TooLarge(_)) => {
            return message(
                StatusCode::PAYLOAD_TOO_LARGE,
                "413 Request Entity Too Large",
            );
        }
        Err(e) => return message(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let parsed: JobRequestBody = match serde_json::from_slice(&bytes) {
        Ok(parsed) => parsed,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({ "error": e.to_string() })),
            )
                .into_response();
        }
    };
    let Some(token) = parsed
        .token
        .filter(|t| !t.is_empty())
        .or_else(|| header_str(headers, RUNNER_TOKEN).map(str::to_owned))
    else {
        return token_missing();
    };
    let request = JobRequest {
        token,
        system_id: parsed.system_id.filter(|s| !s.is_empty()),
        info: parsed.info,
    };
    let Some(current) = shared.mutate(|s| s.record_request(&request)) else {
        return forbidden();
    };
    if let Some(status) = shared.read(|s| s.orphaned(&request.token)) {
        return super::orphaned(status);
    }

    if parsed.last_update.as_deref() == Some(current.as_str()) {
        let long_poll = shared.config.long_poll;
        if long_poll.is_zero() {
            // Rails: the runner is up to date, nothing to look for.
            return no_job(Some(&current));
        }
        // Workhorse: hold until the queue changes (or time runs out), then 204 *without*
        // X-GitLab-Last-Update; the runner's next request then reaches Rails (§3.3).
        let token = request.token.as_str();
        let waited = shared
            .wait_for(long_poll, |s| {
                (s.queue_value(token) != Some(current.as_str())).then_some(())
            })
            .await;
        tracing::debug!(?waited, "long poll ended");
        return no_job(None);
    }

    let now = Instant::now();
    let outcome = shared.mutate(|s| match s.take_job(&request, now) {
        Some(handout) => Ok(handout),
        None => Err(s.queue_value(&request.token).map(str::to_owned)),
    });
    match outcome {
        Ok(handout) => {
            let job_id = handout.payload.job_id;
            if let Some(deadline) = handout.ack_deadline {
                shared.schedule_ack_check(job_id, deadline);
            }
            tracing::info!(job.id = job_id, system_id = ?request.system_id, "job handed out");
            let body = payload::render(&handout.payload, &shared.server_url);
            (StatusCode::CREATED, Json(body)).into_response()
        }
        Err(Some(value)) => no_job(Some(&value)),
        Err(None) => forbidden(),
    }
}

fn no_job(last_update: Option<&str>) -> Response {
    let response = StatusCode::NO_CONTENT.into_response();
    match last_update {
        Some(value) => with_header(response, LAST_UPDATE, value),
        None => response,
    }
}

#[derive(Debug, Default, Deserialize)]
struct UpdateBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    failure_reason: Option<String>,
    #[serde(default)]
    exit_code: Option<i64>,
    /// Deprecated top-level copy of `output.checksum`.
    #[serde(default)]
    checksum: Option<String>,
    #[serde(default)]
    output: Option<UpdateOutput>,
}

#[derive(Debug, Default, Deserialize)]
struct UpdateOutput {
    #[serde(default)]
    checksum: Option<String>,
    #[serde(default)]
    bytesize: Option<u64>,
}

/// `PUT /api/v4/jobs/:id`. Every answer about an authenticated job carries `Job-Status`.
pub(super) async fn update(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return not_found();
    };
    let bytes = match read_limited(&headers, body, UPDATE_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(e) => return message(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let parsed: UpdateBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        UpdateBody::default()
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(parsed) => parsed,
            Err(e) => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "error": e.to_string() })),
                )
                    .into_response();
            }
        }
    };
    let Some(token) = parsed
        .token
        .filter(|t| !t.is_empty())
        .or_else(|| header_str(&headers, JOB_TOKEN).map(str::to_owned))
    else {
        return forbidden();
    };
    let output = parsed.output.unwrap_or_default();
    let update = JobUpdate {
        state: parsed.state.unwrap_or_default(),
        failure_reason: parsed.failure_reason.filter(|r| !r.is_empty()),
        exit_code: parsed.exit_code,
        checksum: output.checksum.or(parsed.checksum),
        bytesize: output.bytesize,
    };
    let reply = shared.mutate(|s| s.update_job(id, &token, &update, Instant::now()));
    if !matches!(
        reply,
        UpdateReply::Updated(_) | UpdateReply::Accepted { .. }
    ) {
        tracing::debug!(job.id = id, state = %update.state, ?reply, "update refused");
    }
    let interval = update_interval_secs(&shared);
    match reply {
        UpdateReply::NotFound => not_found(),
        UpdateReply::Forbidden => forbidden(),
        UpdateReply::NotProcessing(status) => not_processing(status),
        UpdateReply::Invalid(status) => with_job_status(
            message(StatusCode::BAD_REQUEST, "400 Bad request - invalid state"),
            status,
        ),
        UpdateReply::Updated(status) => {
            if status.is_final() {
                tracing::info!(job.id = id, %status, "job finished");
            }
            let response = with_job_status((StatusCode::OK, "200").into_response(), status);
            with_header(response, TRACE_UPDATE_INTERVAL, &interval)
        }
        UpdateReply::Accepted {
            status,
            backoff_secs,
        } => {
            // Rails: final state accepted, trace still being persisted; come back later (§4).
            let response = with_job_status((StatusCode::ACCEPTED, "202").into_response(), status);
            with_header(response, TRACE_UPDATE_INTERVAL, &backoff_secs.to_string())
        }
    }
}
