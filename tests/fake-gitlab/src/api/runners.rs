//! Runner identity calls: verify, unregister, router discovery (runner-protocol.md §2, §8).

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{RUNNER_TOKEN, forbidden, header_str, message, read_limited};
use crate::shared::Shared;
use crate::state::ManagerRemoval;

const IDENTITY_BODY_LIMIT: usize = 64 << 10;

#[derive(Debug, Default, Deserialize)]
struct IdentityBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    system_id: Option<String>,
}

/// The runner token from the JSON body or the `RUNNER-TOKEN` header, and the `system_id`.
async fn identity(headers: &HeaderMap, body: Body) -> Result<(String, Option<String>), Response> {
    let bytes = read_limited(headers, body, IDENTITY_BODY_LIMIT)
        .await
        .map_err(|e| message(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let parsed: IdentityBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        IdentityBody::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                Json(json!({ "error": e.to_string() })),
            )
                .into_response()
        })?
    };
    let token = parsed
        .token
        .filter(|t| !t.is_empty())
        .or_else(|| header_str(headers, RUNNER_TOKEN).map(str::to_owned))
        .ok_or_else(token_missing)?;
    Ok((token, parsed.system_id.filter(|s| !s.is_empty())))
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
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (token, system_id) = match identity(&headers, body).await {
        Ok(identity) => identity,
        Err(response) => return response,
    };
    if let Some(status) = shared.read(|s| s.orphaned(&token)) {
        return super::orphaned(status);
    }
    match shared.mutate(|s| s.verify_runner(&token, system_id.as_deref())) {
        Some(id) => {
            Json(json!({ "id": id, "token": token, "token_expires_at": null })).into_response()
        }
        None => forbidden(),
    }
}

/// `DELETE /api/v4/runners` (legacy): the runner is deleted, its token refused afterwards.
pub(super) async fn unregister(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (token, _) = match identity(&headers, body).await {
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
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (token, system_id) = match identity(&headers, body).await {
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
