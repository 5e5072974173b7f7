//! The admin API's bearer token, as a route layer: a request without it, or with another, is
//! answered `401` and logged once, before any handler runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Admin;

pub async fn require_token(
    State(admin): State<Arc<Admin>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &admin.token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Digests are compared, so the comparison's time says nothing about the token.
    let refusal = match presented {
        None => "no bearer token",
        Some(t) if crate::secret::TokenDigest::of(t) != expected.digest() => "wrong bearer token",
        Some(_) => return next.run(request).await,
    };
    tracing::warn!(method = %request.method(), path = %request.uri().path(), reason = refusal, "admin request refused (401)");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(serde_json::json!({ "error": format!("{refusal}: the admin API needs [admin] token_file's token") })),
    )
        .into_response()
}
