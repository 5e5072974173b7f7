//! `POST /api/v4/jobs/request` for sidecars (runner-protocol.md §3): long-polled until one of the
//! pool's jobs is handed to this request, or `204` after the long-poll timeout.

use std::sync::Arc;

use super::body::{self, read_limited};
use super::params::Params;
use super::runners::{Peer, authenticate, authenticate_again};
use super::{ApiError, App};
use crate::core::JobId;
use crate::core::job::JobPhase;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub async fn request_job(
    State(app): State<Arc<App>>,
    peer: Option<Peer>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_limited(body, &headers, app.limits.job_request_bytes).await?;
    // JSON as runners send it, or a form, multipart body or query parameters (Grape).
    let params = Params::parse(query.as_deref(), &headers, &bytes).await?;
    let info = params.hash("info")?.cloned();
    let token = params
        .token()
        .or_else(|| body::header(&headers, "runner-token").map(str::to_string))
        .ok_or(ApiError::TokenMissing)?;
    let sidecar = match authenticate(&app, &token, peer).await {
        Err(ApiError::AddressNotYetKnown) => match address_known(&app, &token, peer).await {
            Some(sidecar) => sidecar,
            None => return Ok(StatusCode::NO_CONTENT.into_response()),
        },
        other => other?,
    };
    // Held until this request is answered or its client goes away.
    let _held = app
        .long_polls
        .hold(sidecar.id())
        .ok_or(ApiError::TooManyJobRequests {
            limit: app.long_polls.max_per_sidecar(),
        })?;
    // `authenticate` recorded the sidecar and its pool: a field recorded twice is printed twice.
    if let Some(machine) = &sidecar.record.machine {
        tracing::Span::current().record("machine.id", machine.as_str());
    }
    app.sidecars
        .note_poll(&sidecar, info, params.string("system_id"));
    if let (Some(machine), Some(machines)) =
        (&sidecar.record.machine, app.machines.get(sidecar.pool()))
    {
        machines.sidecar_polled(machine);
    }

    let pool = app.pool(sidecar.pool())?;
    let request_id = body::request_id(&headers);
    if let Some(id) = request_id
        .as_deref()
        .and_then(|r| pool.queue.replay(sidecar.id(), r))
    {
        tracing::info!(job.id = %id, "retried job request answered with the job it was already given");
        return job_response(&app, id).await;
    }
    let waited = pool
        .queue
        .wait_for_job(sidecar.id(), request_id, app.limits.long_poll)
        .await;
    app.sidecars.note_seen(&sidecar);
    match waited {
        Some(id) => job_response(&app, id).await,
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// How long a job request from a machine whose address the provider has not reported yet
/// waits for it before hearing "no job" (the sidecar then asks again after its check interval).
const ADDRESS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits for the provider to report where the requesting sidecar's machine is (its `status` is
/// typically a moment away), then authenticates again: the sidecar when its token is now
/// accepted from this address, `None` when the wait ended first.
async fn address_known(
    app: &App,
    token: &str,
    peer: Option<Peer>,
) -> Option<Arc<crate::sidecars::Sidecar>> {
    let pool = app.sidecars.authenticate(token)?.pool().to_string();
    let mut changes = app.machines.get(&pool)?.subscribe();
    let deadline = crate::clock::monotonic() + ADDRESS_WAIT;
    loop {
        match authenticate_again(app, token, peer).await {
            Ok(sidecar) => return Some(sidecar),
            Err(ApiError::AddressNotYetKnown) => {}
            Err(_) => return None,
        }
        let wait = deadline.saturating_duration_since(crate::clock::monotonic());
        if tokio::time::timeout(wait, changes.changed()).await.is_err() {
            return None;
        }
    }
}

/// `201`, `application/json`, the payload exactly as GitLab sent it, once the job's acceptance
/// and this hand-out are on stable storage (this request makes them so). A job that cannot be
/// made durable is not handed out but given back to GitLab: the sidecar hears "no job" and
/// asks again.
async fn job_response(app: &App, id: JobId) -> Result<Response, ApiError> {
    if let Err(e) = app.jobs.durable().await {
        app.jobs.give_back_unstored(id, &e);
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if !matches!(app.jobs.phase(id), Some(JobPhase::Assigned { .. })) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    tracing::Span::current().record("job.id", id.0);
    let payload = app
        .jobs
        .payload(id)
        .map_err(|e| ApiError::Internal(format!("cannot read job {id} from the store: {e}")))?
        .ok_or_else(|| ApiError::Internal(format!("job {id} has no stored payload")))?;
    tracing::info!(job.id = %id, "job handed to sidecar");
    let mut response = (StatusCode::CREATED, Body::from(payload)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
