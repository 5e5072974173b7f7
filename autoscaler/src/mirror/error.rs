//! Every refusal of the mirrored API, mapped to the status GitLab gives in the same case
//! (runner-protocol.md), in one place. Each refusal is logged here, once, inside the request's span
//! (which carries method, path, request id and, once known, sidecar, pool and job ids).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::jobs::Denied;
use crate::upstream::UpstreamError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Grape's answer to a missing required `token` parameter.
    #[error("token is missing")]
    TokenMissing,
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A machine's sidecar token from another address; logged once per (machine, address) by
    /// the check itself, not per request.
    #[error("sidecar token used from an address that is not its machine's")]
    WrongSource,
    /// A machine's sidecar token before the provider has said where that machine is (a sidecar
    /// started from user-data can poll before `status` reports the address): not yet
    /// accepted; a job request hears "no job" and asks again.
    #[error("sidecar token used before its machine's address is known")]
    AddressNotYetKnown,
    #[error("not found: {0}")]
    NotFound(String),
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// A trace patch that does not start where the stored trace ends.
    #[error("trace patch starts at {start}, the trace is {length} bytes long")]
    RangeMismatch { start: u64, length: u64 },
    /// A sidecar token holding as many job requests as it may (`max_job_requests_per_sidecar`).
    #[error("the sidecar already holds {limit} job requests")]
    TooManyJobRequests { limit: usize },
    #[error("GitLab could not be reached: {0}")]
    BadGateway(String),
    #[error("GitLab did not answer in time: {0}")]
    GatewayTimeout(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<Denied> for ApiError {
    fn from(d: Denied) -> Self {
        match d {
            // GitLab's job-token authentication finds the job by its token and refuses any other
            // id with 403, whether or not that id exists (runner-protocol.md §4).
            Denied::UnknownJob(_) => ApiError::Forbidden(d.to_string()),
            Denied::WrongToken(_) | Denied::GivenUp(_) => ApiError::Forbidden(d.to_string()),
        }
    }
}

impl From<UpstreamError> for ApiError {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout(_) => ApiError::GatewayTimeout(e.to_string()),
            UpstreamError::Transport(_) => ApiError::BadGateway(e.to_string()),
        }
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::TokenMissing => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) | ApiError::WrongSource | ApiError::AddressNotYetKnown => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RangeMismatch { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::TooManyJobRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), error = %self, "request failed");
        } else if matches!(self, ApiError::WrongSource | ApiError::AddressNotYetKnown) {
            tracing::debug!(status = status.as_u16(), error = %self, "request refused");
        } else {
            tracing::warn!(status = status.as_u16(), error = %self, "request refused");
        }
        // GitLab's bodies: Grape validation errors use "error", everything else "message"
        // with the status line. Runners read only the status.
        let body = match &self {
            ApiError::TokenMissing => json!({"error": "token is missing"}),
            ApiError::BadRequest(detail) => json!({"error": detail}),
            _ => {
                json!({"message": format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""))})
            }
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let ApiError::RangeMismatch { length, .. } = self
            && let Ok(v) = HeaderValue::from_str(&format!("0-{length}"))
        {
            response.headers_mut().insert("range", v);
        }
        if let ApiError::TooManyJobRequests { .. } = self {
            // Runners wait `Retry-After` seconds before asking again (runner-protocol.md §1.1).
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from_static(RETRY_AFTER_SECONDS));
        }
        response
    }
}

/// How long a sidecar over its job request limit is asked to wait.
const RETRY_AFTER_SECONDS: &str = "5";
