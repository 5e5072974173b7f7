//! Job-token calls, relayed to GitLab (runner-protocol.md §4, §5, §7, §11).
//!
//! Each call is checked first: the job must be one we hold and the token its own (downloads:
//! a declared dependency of a job we hold). Anything else is refused here and GitLab never sees
//! it, so the autoscaler is not an open proxy. What passes is forwarded with its body and the
//! headers a runner sends, and GitLab's status and runner-relevant headers come back as they
//! were. Artifacts stream through in both directions.
//!
//! Per-job order towards GitLab is kept: nothing is relayed for a job whose acknowledgement
//! GitLab has not taken, and no final state before its spooled artifacts (see `delivery.rs`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;

use super::body::{header, read_limited};
use super::params::Params;
use super::{ApiError, App};
use crate::core::JobId;
use crate::core::acceptance::RelayedCall;
use crate::core::job::{JobEvent, JobPhase};
use crate::delivery::DeliveryError;
use crate::store::JobRecord;
use crate::upstream::{
    Forward, ForwardBody, Forwarded, filter_request_headers, filter_response_headers,
};

/// The `:id` of a job route, which GitLab declares an `Integer`: anything else is `400 id is
/// invalid`; a negative number is a job no token opens (`403`).
fn job_id(raw: &str) -> Result<JobId, ApiError> {
    let id = raw
        .trim()
        .parse::<i64>()
        .map_err(|_| ApiError::BadRequest("id is invalid".into()))?;
    u64::try_from(id)
        .map(JobId)
        .map_err(|_| ApiError::Forbidden(format!("there is no job {id}")))
}

fn note_job(app: &App, record: &JobRecord) {
    let span = tracing::Span::current();
    span.record("job.id", record.id.0);
    span.record("pool", record.pool.as_str());
    // A call for a job is a sign of life from the sidecar that runs it.
    let sidecar = match &record.phase {
        JobPhase::Assigned { sidecar, .. } => Some(*sidecar),
        JobPhase::Running { sidecar, .. } => *sidecar,
        _ => None,
    };
    if let Some(s) = sidecar.and_then(|id| app.sidecars.by_id(id)) {
        app.sidecars.note_seen(&s);
        span.record("sidecar.id", s.id().0);
        if let Some(machine) = &s.record.machine {
            span.record("machine.id", machine.as_str());
        }
    }
}

/// The job token wherever GitLab takes it: the `token` parameter first (query, or a parsed
/// body), then the `JOB-TOKEN` header, then the `job_token` query parameter.
fn job_token(params: &Params, headers: &HeaderMap) -> Option<String> {
    params
        .token()
        .or_else(|| header(headers, "job-token").map(str::to_string))
        .or_else(|| params.string("job_token"))
}

/// The job token of a call whose body is not parameters (trace, artifacts); GitLab answers
/// `403` without one.
fn query_job_token(query: Option<&str>, headers: &HeaderMap) -> Result<String, ApiError> {
    job_token(&Params::from_query(query)?, headers)
        .ok_or_else(|| ApiError::Forbidden("no job token".into()))
}

/// Any relayed call for a job is a sign of life from the sidecar it was handed to: from now
/// on the job is that sidecar's and is never offered to another (`core::acceptance`).
fn signed_by_sidecar(app: &App, id: JobId, call: RelayedCall) {
    record_event(app, id, call.event());
}

impl From<DeliveryError> for ApiError {
    fn from(e: DeliveryError) -> Self {
        match e {
            DeliveryError::Upstream(u) => u.into(),
            other => ApiError::BadGateway(format!(
                "GitLab has not taken what it is owed for this job yet: {other}"
            )),
        }
    }
}

/// Relays a call, noting whether GitLab answered (a failing GitLab makes uploads spool).
async fn forward(
    app: &App,
    method: Method,
    path: String,
    query: Option<String>,
    headers: &HeaderMap,
    body: ForwardBody,
    timeout: Duration,
) -> Result<Forwarded, ApiError> {
    let call = Forward {
        method,
        path,
        query,
        headers: filter_request_headers(headers),
        body,
        timeout,
    };
    match app.upstream.forward(call).await {
        Ok(f) => {
            app.delivery.gitlab_answered(!f.status.is_server_error());
            Ok(f)
        }
        Err(e) => {
            app.delivery.gitlab_answered(false);
            Err(e.into())
        }
    }
}

/// Answers above this size (artifact downloads) are streamed through; smaller ones (updates,
/// trace acknowledgements) are read whole first so that they go out in one write with their
/// headers: a streamed body is a second write, hence a second segment and a second wake-up
/// for the sidecar on every relayed call.
const WHOLE_ANSWER_BYTES: u64 = 64 * 1024;

async fn respond(forwarded: Forwarded) -> Result<Response, ApiError> {
    let headers = filter_response_headers(&forwarded.headers);
    let small = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= WHOLE_ANSWER_BYTES);
    let body = if small {
        let chunks: Vec<bytes::Bytes> = forwarded
            .body
            .try_collect()
            .await
            .map_err(|e| ApiError::BadGateway(format!("GitLab's answer broke off: {e}")))?;
        Body::from(chunks.concat())
    } else {
        Body::from_stream(forwarded.body)
    };
    let mut response = body.into_response();
    *response.status_mut() = forwarded.status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// `PUT /api/v4/jobs/:id`: acceptance, keep-alive and final state.
pub async fn update_job(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    let bytes = read_limited(body, &headers, app.limits.update_bytes).await?;
    // JSON as runners send it, or form, multipart or query parameters; the bytes go to GitLab
    // unchanged, with the query.
    let update = Params::parse(query.as_deref(), &headers, &bytes).await?;
    update.hash("info")?;
    // `PUT /jobs/:id` requires `token` (GitLab: 400 without it); the header is taken too.
    let token = job_token(&update, &headers).ok_or(ApiError::TokenMissing)?;
    let record = app.jobs.authorize(id, &token)?;
    note_job(&app, &record);
    let state = update.string("state").unwrap_or_default();
    let state = state.as_str();
    let accepting = state == "running";
    let is_final = matches!(state, "success" | "failed");
    // The sidecar has the job whatever GitLab says next, whatever state it sends: the job
    // leaves the hand-out queue now.
    signed_by_sidecar(&app, id, RelayedCall::Update);
    if !accepting {
        // A `running` update is itself an acknowledgement; anything else needs one first.
        app.delivery.ensure_acknowledged(id).await?;
    }
    let mut bytes = bytes;
    if is_final {
        // The job token stops working once GitLab has the final state: artifacts first, and
        // never inside this call (the runner would time out waiting): come back later.
        if app.delivery.uploads_pending(id) {
            return Ok(come_back_later());
        }
        if let Some(record) = app.jobs.get(id) {
            bytes = app.delivery.final_update_body(&record, bytes).await;
        }
    }
    let forwarded = forward(
        &app,
        Method::PUT,
        format!("/api/v4/jobs/{id}"),
        query,
        &headers,
        ForwardBody::Bytes(bytes),
        app.limits.call_timeout,
    )
    .await?;
    let status = forwarded.status.as_u16();
    if accepting && status == 200 {
        note(app.jobs.set_acknowledged(id, true));
    }
    if (is_final && status == 200) || status == 403 || status == 404 {
        // GitLab has the final state, or no longer accepts anything for this job (canceled,
        // or over). A failed or canceled job stops its pipeline: GitLab skips what follows.
        if state == "failed" || status != 200 {
            note(app.jobs.ends_failed(id));
        }
        record_event(&app, id, JobEvent::Ended);
        tracing::info!(state, upstream_status = status, "job ended");
    }
    respond(forwarded).await
}

/// GitLab's own answer to a final update it cannot finish yet (runner-protocol.md §4): `202`,
/// and `X-GitLab-Trace-Update-Interval` for when to ask again.
fn come_back_later() -> Response {
    const RETRY_SECS: &str = "3";
    (
        axum::http::StatusCode::ACCEPTED,
        [
            ("job-status", "running"),
            ("x-gitlab-trace-update-interval", RETRY_SECS),
        ],
        "202",
    )
        .into_response()
}

fn note<E: std::fmt::Display>(result: Result<(), E>) {
    if let Err(e) = result {
        tracing::warn!(error = %e, "job record not updated");
    }
}

fn record_event(app: &App, id: JobId, event: JobEvent) {
    match app.jobs.apply(id, event) {
        Ok((before, after)) if before != after => {
            tracing::debug!(from = before.name(), to = after.name(), "job phase changed");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "job phase not changed"),
    }
}

/// The start of `Content-Range: start-end`, the only part GitLab reads (runner-protocol.md
/// §5): it takes the text before the first `-` as Ruby's `to_i` does (leading digits, else 0)
/// and computes the end itself, so an exclusive end (runners before v11.3) or an empty patch
/// is fine. Only a missing header is refused (`400`).
pub(super) fn content_range_start(headers: &HeaderMap) -> Result<u64, ApiError> {
    let raw = headers
        .get("content-range")
        .ok_or_else(|| ApiError::BadRequest("400 Missing header Content-Range".into()))?;
    let text = String::from_utf8_lossy(raw.as_bytes());
    let before = text.split('-').next().unwrap_or_default().trim_start();
    let before = before.strip_prefix('+').unwrap_or(before);
    let digits: String = before.chars().take_while(char::is_ascii_digit).collect();
    Ok(digits.parse::<u64>().unwrap_or(0))
}

/// `PATCH /api/v4/jobs/:id/trace`: one trace chunk.
pub async fn patch_trace(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    let token = query_job_token(query.as_deref(), &headers)?;
    let record = app.jobs.authorize(id, &token)?;
    note_job(&app, &record);
    signed_by_sidecar(&app, id, RelayedCall::Trace);
    let start = content_range_start(&headers)?;
    let bytes = read_limited(body, &headers, app.limits.trace_patch_bytes).await?;
    // GitLab appends only at the stored length, and answers 202 when the stored length then
    // equals start + body size, 416 otherwise: the second case is answered here.
    if let Some(length) = app.jobs.trace_length(id)
        && length != start
        && start.saturating_add(bytes.len() as u64) != length
    {
        return Err(ApiError::RangeMismatch { start, length });
    }
    app.delivery.ensure_acknowledged(id).await?;
    let forwarded = forward(
        &app,
        Method::PATCH,
        format!("/api/v4/jobs/{id}/trace"),
        query,
        &headers,
        ForwardBody::Bytes(bytes),
        app.limits.call_timeout,
    )
    .await?;
    // GitLab reports the stored length as `Range: 0-<length>` on 202 and 416.
    if matches!(forwarded.status.as_u16(), 202 | 416)
        && let Some(length) = crate::upstream::range_end(&forwarded.headers)
    {
        app.jobs.set_trace_length(id, length);
    }
    respond(forwarded).await
}

/// `POST /api/v4/jobs/:id/artifacts`: streamed to GitLab as it arrives; while GitLab is failing,
/// kept on disk instead and answered `201`, to be uploaded before the job's final state.
pub async fn upload_artifacts(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    // The token comes from the header or the query: GitLab's front end authorizes an upload
    // before it reads the multipart body.
    let token = query_job_token(query.as_deref(), &headers)?;
    let record = app.jobs.authorize(id, &token)?;
    note_job(&app, &record);
    signed_by_sidecar(&app, id, RelayedCall::ArtifactUpload);
    let stream = Box::pin(body.into_data_stream().map_err(std::io::Error::other));
    if app.delivery.gitlab_failing() {
        let content_type = header(&headers, "content-type")
            .unwrap_or("application/octet-stream")
            .to_string();
        app.delivery.spool(id, query, content_type, stream).await?;
        return Ok((
            axum::http::StatusCode::CREATED,
            axum::Json(serde_json::json!({})),
        )
            .into_response());
    }
    app.delivery.ensure_acknowledged(id).await?;
    let forwarded = forward(
        &app,
        Method::POST,
        format!("/api/v4/jobs/{id}/artifacts"),
        query,
        &headers,
        ForwardBody::Stream(stream),
        app.limits.artifact_timeout,
    )
    .await?;
    tracing::info!(
        upstream_status = forwarded.status.as_u16(),
        "artifacts relayed"
    );
    respond(forwarded).await
}

/// `GET /api/v4/jobs/:id/artifacts`: a dependency's artifacts, streamed back.
pub async fn download_artifacts(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    tracing::Span::current().record("job.id", id.0);
    let token = query_job_token(query.as_deref(), &headers)?;
    app.jobs.authorize_download(id, &token)?;
    let forwarded = forward(
        &app,
        Method::GET,
        format!("/api/v4/jobs/{id}/artifacts"),
        query,
        &headers,
        ForwardBody::Empty,
        app.limits.artifact_timeout,
    )
    .await?;
    respond(forwarded).await
}
