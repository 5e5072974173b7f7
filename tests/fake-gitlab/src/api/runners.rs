//! Runner identity calls: register, verify, unregister, router discovery (runner-protocol.md §2, §8).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::params::{Params, invalid};
use super::{RUNNER_TOKEN, forbidden, header_str, message, read_limited};
use crate::shared::Shared;
use crate::state::{ManagerRemoval, Registration};

const IDENTITY_BODY_LIMIT: usize = 64 << 10;

/// The parameters of an identity call (query, then a JSON, form or multipart body), its runner
/// or registration token (parameter `token`, else `RUNNER-TOKEN`) and its `system_id`.
async fn identity(
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Params, String, Option<String>), Response> {
    let bytes = read_limited(headers, body, IDENTITY_BODY_LIMIT)
        .await
        .map_err(|e| message(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let params = Params::parse(query, headers, &bytes)
        .await
        .map_err(IntoResponse::into_response)?;
    let token = params
        .string("token")
        .or_else(|| header_str(headers, RUNNER_TOKEN).map(str::to_owned))
        .ok_or_else(token_missing)?;
    let system_id = params.string("system_id");
    Ok((params, token, system_id))
}

/// `POST /api/v4/runners`: registration with a registration token (GitLab's legacy flow).
/// `201 {id, token, token_expires_at}` with a new `glrt-` token; unknown token `403`; the typed
/// parameters checked as Grape checks them (`400 {"error": "x is invalid"}`).
pub(super) async fn register(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, token, _) = match identity(query.as_deref(), &headers, body).await {
        Ok(identity) => identity,
        Err(response) => return response,
    };
    // `info` is declared a Hash here: an array (or a string) is refused.
    if let Err(e) = params.hash("info") {
        return e.into_response();
    }
    let mut errors = Vec::new();
    for name in ["run_untagged", "locked", "paused", "active"] {
        if let Err(e) = params.boolean(name) {
            errors.push(e);
        }
    }
    let tags = params.list("tag_list").unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    if params
        .0
        .get("maximum_timeout")
        .is_some_and(|v| !v.is_null())
        && params
            .string("maximum_timeout")
            .and_then(|t| t.parse::<i64>().ok())
            .is_none()
    {
        errors.push("maximum_timeout is invalid".to_owned());
    }
    if !errors.is_empty() {
        return invalid(&errors.join(", "));
    }
    let registration = Registration {
        description: params.string("description"),
        tags,
    };
    match shared.mutate(|s| s.register_runner(&token, registration)) {
        Some((id, runner_token)) => {
            tracing::info!(runner.id = id, "runner registered");
            (
                StatusCode::CREATED,
                Json(json!({ "id": id, "token": runner_token, "token_expires_at": null })),
            )
                .into_response()
        }
        None => forbidden(),
    }
}

/// Grape's answer to a missing required parameter.
pub(super) fn token_missing() -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": "token is missing" })),
    )
        .into_response()
}

/// `POST /api/v4/runners/verify`: `200 {id, token, token_expires_at: null}` (null so that the
/// runner never schedules a token rotation, §2).
pub(super) async fn verify(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (params, token, system_id) = match identity(query.as_deref(), &headers, body).await {
        Ok(identity) => identity,
        Err(response) => return response,
    };
    if let Some(status) = shared.read(|s| s.orphaned(&token)) {
        return super::orphaned(status);
    }
    // Not type-checked on verify (not declared there): only an object is kept.
    let info = params.hash("info").ok().flatten();
    match shared.mutate(|s| s.verify_runner(&token, system_id.as_deref(), info)) {
        Some(id) => {
            Json(json!({ "id": id, "token": token, "token_expires_at": null })).into_response()
        }
        None => forbidden(),
    }
}

/// `DELETE /api/v4/runners` (legacy): the runner is deleted, its token refused afterwards.
pub(super) async fn unregister(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (_, token, _) = match identity(query.as_deref(), &headers, body).await {
        Ok(identity) => identity,
        Err(response) => return response,
    };
    if shared.mutate(|s| s.remove_runner(&token)) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        forbidden()
    }
}

/// `DELETE /api/v4/runners/managers`: forgets one runner manager (`system_id`).
pub(super) async fn unregister_manager(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (_, token, system_id) = match identity(query.as_deref(), &headers, body).await {
        Ok(identity) => identity,
        Err(response) => return response,
    };
    let Some(system_id) = system_id else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "system_id is missing" })),
        )
            .into_response();
    };
    match shared.mutate(|s| s.remove_manager(&token, &system_id)) {
        ManagerRemoval::Removed => StatusCode::NO_CONTENT.into_response(),
        ManagerRemoval::UnknownManager => {
            message(StatusCode::NOT_FOUND, "404 Runner manager not found")
        }
        ManagerRemoval::UnknownRunner => forbidden(),
    }
}

/// `GET /api/v4/runners/router/discovery`: no job router here; the runner falls back (§8).
pub(super) async fn router_discovery() -> Response {
    message(StatusCode::NOT_IMPLEMENTED, "501 Not Implemented")
}
