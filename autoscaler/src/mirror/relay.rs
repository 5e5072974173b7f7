//! Job-token calls, relayed to GitLab (runner-api.md §4, §5, §7, §11).
//!
//! Each call is checked first: the job must be one we hold and the token its own (downloads:
//! a declared dependency of a job we hold). Anything else is refused here and GitLab never sees
//! it, so the autoscaler is not an open proxy. What passes is forwarded with its body and the
//! headers a runner sends, and GitLab's status and runner-relevant headers come back as they
//! were. Artifacts stream through in both directions.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::TryStreamExt;
use serde::Deserialize;

use super::body::{header, read_limited};
use super::{ApiError, App};
use crate::core::JobId;
use crate::core::job::JobEvent;
use crate::jobs::Jobs;
use crate::store::JobRecord;
use crate::upstream::{
    Forward, ForwardBody, Forwarded, Upstream, filter_request_headers, filter_response_headers,
};

/// How long one attempt to deliver a pending acceptance may take.
const ACCEPTANCE_TIMEOUT: Duration = Duration::from_secs(30);

fn job_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse::<u64>()
        .map(JobId)
        .map_err(|_| ApiError::NotFound(format!("{raw:?} is not a job id")))
}

fn note_job(record: &JobRecord) {
    let span = tracing::Span::current();
    span.record("job.id", record.id.0);
    span.record("pool", record.pool.as_str());
}

fn job_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    header(headers, "job-token").ok_or_else(|| ApiError::Forbidden("no JOB-TOKEN".into()))
}

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
    Ok(app.upstream.forward(call).await?)
}

/// Sends a job's acceptance that GitLab has not confirmed yet (it was down when the sidecar sent
/// it). `Ok` once GitLab answered with anything but a server error: then it has either taken the
/// acceptance or made up its mind about the job, and later calls get its verdict.
pub async fn deliver_acceptance(
    upstream: &dyn Upstream,
    jobs: &Jobs,
    id: JobId,
    body: Bytes,
) -> Result<(), ApiError> {
    let Some(record) = jobs.get(id) else {
        return Ok(());
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Ok(token) = http::HeaderValue::from_str(record.token.expose()) {
        headers.insert("job-token", token);
    }
    let call = Forward {
        method: Method::PUT,
        path: format!("/api/v4/jobs/{id}"),
        query: None,
        headers,
        body: ForwardBody::Bytes(body.clone()),
        timeout: ACCEPTANCE_TIMEOUT,
    };
    let result = upstream.forward(call).await;
    match result {
        Ok(f) if !f.status.is_server_error() => {
            jobs.set_pending_acceptance(id, None);
            Ok(())
        }
        Ok(f) => {
            jobs.set_pending_acceptance(id, Some(body));
            Err(ApiError::BadGateway(format!(
                "GitLab answered {} to the job's acceptance",
                f.status
            )))
        }
        Err(e) => {
            jobs.set_pending_acceptance(id, Some(body));
            Err(e.into())
        }
    }
}

/// Before relaying anything else for a job whose acceptance GitLab has not seen, deliver it;
/// while GitLab cannot take it, the call is answered `502` (the runner retries) and not sent.
async fn ensure_accepted(app: &App, id: JobId) -> Result<(), ApiError> {
    match app.jobs.pending_acceptance(id) {
        None => Ok(()),
        Some(body) => deliver_acceptance(app.upstream.as_ref(), &app.jobs, id, body).await,
    }
}

fn respond(forwarded: Forwarded) -> Response {
    let mut response = Body::from_stream(forwarded.body).into_response();
    *response.status_mut() = forwarded.status;
    *response.headers_mut() = filter_response_headers(&forwarded.headers);
    response
}

#[derive(Deserialize)]
struct UpdateBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

/// `PUT /api/v4/jobs/:id`: acceptance, keep-alive and final state.
pub async fn update_job(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    let bytes = read_limited(body, &headers, app.limits.update_bytes).await?;
    let update: UpdateBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("body is not valid JSON: {e}")))?;
    let token = update
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .or_else(|| header(&headers, "job-token"))
        .ok_or_else(|| ApiError::Forbidden("no job token".into()))?;
    let record = app.jobs.authorize(id, token)?;
    note_job(&record);
    let state = update.state.as_deref().unwrap_or("");
    let accepting = state == "running";
    if accepting {
        // The sidecar has the job whatever GitLab says next: it leaves the hand-out queue now.
        record_event(&app, id, JobEvent::Accepted);
    } else {
        ensure_accepted(&app, id).await?;
    }
    let sent = forward(
        &app,
        Method::PUT,
        format!("/api/v4/jobs/{id}"),
        None,
        &headers,
        ForwardBody::Bytes(bytes.clone()),
        app.limits.call_timeout,
    )
    .await;
    if accepting {
        // A `running` update that GitLab did not take is kept, to be delivered before anything
        // else for the job: a stock runner runs the job anyway and never resends it.
        let unconfirmed = sent.as_ref().map_or(true, |f| f.status.is_server_error());
        app.jobs
            .set_pending_acceptance(id, unconfirmed.then_some(bytes));
    }
    let forwarded = sent?;
    let status = forwarded.status.as_u16();
    let is_final = matches!(state, "success" | "failed");
    if (is_final && status == 200) || status == 403 || status == 404 {
        // GitLab has the final state, or no longer accepts anything for this job.
        record_event(&app, id, JobEvent::Ended);
        tracing::info!(state, upstream_status = status, "job ended");
    }
    Ok(respond(forwarded))
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

/// `(start, end)` of an inclusive `Content-Range: start-end`.
fn content_range(headers: &HeaderMap) -> Result<(u64, u64), ApiError> {
    let raw = header(headers, "content-range")
        .ok_or_else(|| ApiError::BadRequest("Missing header Content-Range".into()))?;
    let parse = || {
        let (start, end) = raw.split_once('-')?;
        Some((
            start.trim().parse::<u64>().ok()?,
            end.trim().parse::<u64>().ok()?,
        ))
    };
    match parse() {
        Some((start, end)) if end >= start => Ok((start, end)),
        _ => Err(ApiError::BadRequest(format!(
            "malformed Content-Range {raw:?}"
        ))),
    }
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
    let token = job_token(&headers)?;
    let record = app.jobs.authorize(id, token)?;
    note_job(&record);
    let (start, end) = content_range(&headers)?;
    let bytes = read_limited(body, &headers, app.limits.trace_patch_bytes).await?;
    if end - start + 1 != bytes.len() as u64 {
        return Err(ApiError::BadRequest(format!(
            "Content-Range {start}-{end} announces {} bytes, the body has {}",
            end - start + 1,
            bytes.len()
        )));
    }
    if let Some(length) = app.jobs.trace_length(id)
        && length != start
    {
        return Err(ApiError::RangeMismatch { start, length });
    }
    ensure_accepted(&app, id).await?;
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
        && let Some(length) = header(&forwarded.headers, "range")
            .and_then(|r| r.split_once('-'))
            .and_then(|(_, n)| n.trim().parse::<u64>().ok())
    {
        app.jobs.set_trace_length(id, length);
    }
    Ok(respond(forwarded))
}

/// `POST /api/v4/jobs/:id/artifacts`: streamed to GitLab as it arrives.
pub async fn upload_artifacts(
    State(app): State<Arc<App>>,
    Path(raw_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let id = job_id(&raw_id)?;
    let token = job_token(&headers)?;
    let record = app.jobs.authorize(id, token)?;
    note_job(&record);
    ensure_accepted(&app, id).await?;
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let forwarded = forward(
        &app,
        Method::POST,
        format!("/api/v4/jobs/{id}/artifacts"),
        query,
        &headers,
        ForwardBody::Stream(Box::pin(stream)),
        app.limits.artifact_timeout,
    )
    .await?;
    tracing::info!(
        upstream_status = forwarded.status.as_u16(),
        "artifacts relayed"
    );
    Ok(respond(forwarded))
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
    let token = job_token(&headers)?;
    app.jobs.authorize_download(id, token)?;
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
    Ok(respond(forwarded))
}
