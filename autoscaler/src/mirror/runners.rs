//! Runner identity endpoints (runner-protocol.md §2), answered from the autoscaler's own sidecar
//! registry. The tokens minted here are the sidecars' own; the pool's upstream token is never
//! involved.

use std::sync::Arc;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::RawQuery;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::binding::check_source;
use super::body::{header, read_limited};
use super::params::Params;
use super::{ApiError, App};
use crate::sidecars::Sidecar;

/// The identity calls carry small JSON bodies; anything beyond this is not a runner talking.
const IDENTITY_BODY_LIMIT: u64 = 64 * 1024;

/// The parameters of an identity call and its runner (or registration) token, from the
/// parameters (query, JSON, form or multipart body) or else the `RUNNER-TOKEN` header.
async fn identity(
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Params, String), ApiError> {
    let bytes = read_limited(body, headers, IDENTITY_BODY_LIMIT).await?;
    let params = Params::parse(query, headers, &bytes).await?;
    let token = params
        .token()
        .or_else(|| header(headers, "runner-token").map(str::to_string))
        .ok_or(ApiError::TokenMissing)?;
    Ok((params, token))
}

/// The parameters `POST /runners` declares with a type, checked as Grape checks them.
fn check_registration(params: &Params) -> Result<(), ApiError> {
    // `info` is declared a Hash: an array is refused as Grape does.
    params.hash("info")?;
    let mut invalid = Vec::new();
    for name in ["run_untagged", "locked", "paused", "active"] {
        if let Err(e) = params.boolean(name) {
            invalid.push(e.to_string());
        }
    }
    if let Err(e) = params.list("tag_list") {
        invalid.push(e.to_string());
    }
    if let Some(v) = params.get("maximum_timeout")
        && !v.is_null()
        && params
            .string("maximum_timeout")
            .and_then(|t| t.parse::<i64>().ok())
            .is_none()
    {
        invalid.push("maximum_timeout is invalid".into());
    }
    if invalid.is_empty() {
        Ok(())
    } else {
        Err(ApiError::BadRequest(invalid.join(", ")))
    }
}

/// The sidecar whose token this is, when the request comes from where that token may be used;
/// recorded in the request's span (before the address check, so that a refusal names it).
pub(super) async fn authenticate(
    app: &App,
    token: &str,
    peer: Option<Peer>,
) -> Result<Arc<Sidecar>, ApiError> {
    let sidecar = token_holder(app, token)?;
    let span = tracing::Span::current();
    span.record("sidecar.id", sidecar.id().0);
    span.record("pool", sidecar.pool());
    check_source(app, &sidecar, peer.map(|Extension(ConnectInfo(p))| p)).await?;
    Ok(sidecar)
}

/// [`authenticate`] for a request that asks again, whose span already names the sidecar: a
/// field recorded twice is printed twice.
pub(super) async fn authenticate_again(
    app: &App,
    token: &str,
    peer: Option<Peer>,
) -> Result<Arc<Sidecar>, ApiError> {
    let sidecar = token_holder(app, token)?;
    check_source(app, &sidecar, peer.map(|Extension(ConnectInfo(p))| p)).await?;
    Ok(sidecar)
}

fn token_holder(app: &App, token: &str) -> Result<Arc<Sidecar>, ApiError> {
    app.sidecars
        .authenticate(token)
        .ok_or_else(|| ApiError::Forbidden("unknown runner token".into()))
}

/// The client's address, put into every request by the server (`conn`).
pub(super) type Peer = Extension<ConnectInfo<SocketAddr>>;

fn details(id: u64, token: &str) -> Json<serde_json::Value> {
    // `token_expires_at: null` keeps runners from scheduling token rotation (runner-protocol.md §2).
    Json(json!({"id": id, "token": token, "token_expires_at": null}))
}

/// `POST /api/v4/runners`: registration with a pool's registration token.
pub async fn register(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (params, registration_token) = identity(query.as_deref(), &headers, body).await?;
    check_registration(&params)?;
    let pool = app
        .pool_for_registration(&registration_token)
        .ok_or_else(|| ApiError::Forbidden("unknown registration token".into()))?
        .to_string();
    let description = params
        .string("description")
        .map(|d| d.chars().take(255).collect());
    let (sidecar, token) = app
        .sidecars
        .register(&pool, description, None)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    tracing::info!(sidecar.id = %sidecar.id(), pool = %pool, "sidecar registered");
    Ok((StatusCode::CREATED, details(sidecar.id().0, token.expose())).into_response())
}

/// `POST /api/v4/runners/verify`.
pub async fn verify(
    State(app): State<Arc<App>>,
    peer: Option<Peer>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_, token) = identity(query.as_deref(), &headers, body).await?;
    let sidecar = authenticate(&app, &token, peer).await?;
    Ok((StatusCode::OK, details(sidecar.id().0, &token)).into_response())
}

/// `DELETE /api/v4/runners`: the sidecar's token stops working.
pub async fn unregister(
    State(app): State<Arc<App>>,
    peer: Option<Peer>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_, token) = identity(query.as_deref(), &headers, body).await?;
    let sidecar = authenticate(&app, &token, peer).await?;
    app.sidecars
        .revoke(&sidecar)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    tracing::info!("sidecar unregistered");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /api/v4/runners/managers`: GitLab forgets a runner *manager* (one `system_id`) and
/// keeps the runner, so the token stays valid here too. GitLab requires `system_id`; it answers
/// `404` for one it never saw, which this registry does not keep across restarts, so any
/// `system_id` is taken (runner-protocol.md §2).
pub async fn unregister_manager(
    State(app): State<Arc<App>>,
    peer: Option<Peer>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (params, token) = identity(query.as_deref(), &headers, body).await?;
    if params.string("system_id").is_none() {
        return Err(ApiError::BadRequest("system_id is missing".into()));
    }
    authenticate(&app, &token, peer).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /api/v4/runners/reset_authentication_token`.
pub async fn reset_token(
    State(app): State<Arc<App>>,
    peer: Option<Peer>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (_, token) = identity(query.as_deref(), &headers, body).await?;
    let sidecar = authenticate(&app, &token, peer).await?;
    let new = app
        .sidecars
        .rotate(&sidecar)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"token": new.expose(), "token_expires_at": null})),
    )
        .into_response())
}

/// `GET /api/v4/runners/router/discovery`: no job router here; runners fall back to
/// `POST /jobs/request` on `501` (runner-protocol.md §8).
pub async fn router_discovery() -> Response {
    (
        StatusCode::NOT_IMPLEMENTED,
        Json(json!({"message": "501 Not Implemented"})),
    )
        .into_response()
}
