//! Reading request bodies under a size limit, and the token headers.

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;

/// Reads a whole body of at most `limit` bytes; larger ones are refused with `413` before or
/// while reading, never buffered past the limit.
pub async fn read_limited(body: Body, headers: &HeaderMap, limit: u64) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge { limit });
    }
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit_usize).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::TooLarge { limit })
        }
        Err(e) => Err(ApiError::BadRequest(format!(
            "could not read the request body: {e}"
        ))),
    }
}

pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The request's `X-Request-Id`, if it looks like one (runners send 32 hex digits).
pub fn request_id(headers: &HeaderMap) -> Option<String> {
    header(headers, "x-request-id")
        .filter(|v| v.len() <= 128)
        .map(str::to_string)
}
