//! `POST /api/v4/jobs/request` (Workhorse long polling + Rails assignment, runner-protocol.md §3) and
//! `PUT /api/v4/jobs/:id` (§3.5, §4).

use std::sync::Arc;
use std::time::Instant;

use super::params::{ParamError, Params, job_token};
use super::runners::token_missing;
use super::{
    LAST_UPDATE, RUNNER_TOKEN, TRACE_UPDATE_INTERVAL, forbidden, header_str, message, not_found,
    not_processing, parse_id, read_limited, update_interval_secs, with_header, with_job_status,
};
use crate::payload;
use crate::shared::Shared;
use crate::state::{JobRequest, JobUpdate, UpdateReply};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Workhorse reads at most 32 KiB of a job request (runner-protocol.md §3.1).
const JOB_REQUEST_BODY_LIMIT: usize = 32 << 10;
const UPDATE_BODY_LIMIT: usize = 1 << 20;
/// Workhorse marks the answers of a long-polling install.
const BUILDS_POLLING: HeaderName = HeaderName::from_static("gitlab-ci-builds-polling");

pub(super) async fn request(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut response = request_job(&shared, query.as_deref(), &headers, body).await;
    if !shared.config.long_poll.is_zero() {
        response
            .headers_mut()
            .insert(BUILDS_POLLING, HeaderValue::from_static("yes"));
    }
    response
}

async fn request_job(
    shared: &Arc<Shared>,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
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
    // JSON as runners send it; a form, multipart body or query parameters work as in Grape.
    let params = match Params::parse(query, headers, &bytes).await {
        Ok(params) => params,
        Err(e) => return e.into_response(),
    };
    let info = match params.hash("info") {
        Ok(info) => info,
        Err(e) => return e.into_response(),
    };
    let Some(token) = params
        .string("token")
        .or_else(|| header_str(headers, RUNNER_TOKEN).map(str::to_owned))
    else {
        return token_missing();
    };
    let last_update = params.string("last_update");
    let request = JobRequest {
        token,
        system_id: params.string("system_id"),
        info,
    };
    let Some(current) = shared.mutate(|s| s.record_request(&request)) else {
        return forbidden();
    };
    if let Some(status) = shared.read(|s| s.orphaned(&request.token)) {
        return super::orphaned(status);
    }

    if last_update.as_deref() == Some(current.as_str()) {
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

/// `PUT /api/v4/jobs/:id`. Every answer about an authenticated job carries `Job-Status`.
pub(super) async fn update(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
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
    let params = match Params::parse(query.as_deref(), &headers, &bytes).await {
        Ok(params) => params,
        Err(e) => return e.into_response(),
    };
    let update = match update_params(&params) {
        Ok(update) => update,
        Err(e) => return e.into_response(),
    };
    // `token` is required here (Grape: 400 without it); `JOB-TOKEN` is taken as well.
    let Some(token) = job_token(&params, &headers) else {
        return token_missing();
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

/// The update's typed parameters (`exit_code` an Integer, `output` a Hash, as Grape declares).
fn update_params(params: &Params) -> Result<JobUpdate, ParamError> {
    let output = params.hash("output")?.unwrap_or_default();
    params.hash("info")?;
    let exit_code = match params.0.get("exit_code") {
        None | Some(serde_json::Value::Null) => None,
        Some(_) => match params.string("exit_code").map(|c| c.parse::<i64>()) {
            Some(Ok(code)) => Some(code),
            _ => return Err(ParamError::Invalid("exit_code".to_owned())),
        },
    };
    let output_str = |name: &str| {
        output.get(name).and_then(|v| match v {
            serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    Ok(JobUpdate {
        state: params.string("state").unwrap_or_default(),
        failure_reason: params.string("failure_reason"),
        exit_code,
        checksum: output_str("checksum").or_else(|| params.string("checksum")),
        bytesize: output_str("bytesize").and_then(|b| b.parse().ok()),
    })
}
