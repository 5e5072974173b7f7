//! `PATCH /api/v4/jobs/:id/trace` (runner-protocol.md §5).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::params::{Params, job_token};
use super::{
    ReadBodyError, TRACE_UPDATE_INTERVAL, forbidden, message, not_found, not_processing, parse_id,
    read_limited, update_interval_secs, with_header, with_job_status,
};
use crate::control::JobStatus;
use crate::shared::Shared;
use crate::state::TraceReply;

/// Only the start of `Content-Range: <start>-<end>` matters to GitLab: Rails splits the value
/// at `-` and reads the first piece with Ruby's `to_i` (leading digits, else 0), and computes the
/// end itself. So an exclusive end (runners before v11.3), an empty patch, even a value without
/// digits are taken; only a missing header is refused. The answer's `Range` carries the stored
/// length (the next offset).
fn range_start(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(header::CONTENT_RANGE)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    let first = text.split('-').next().unwrap_or_default().trim_start();
    let first = first.strip_prefix('+').unwrap_or(first);
    let digits: String = first.chars().take_while(char::is_ascii_digit).collect();
    Some(digits.parse().unwrap_or(0))
}

pub(super) async fn append(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return not_found();
    };
    // `token` as a query parameter or the `JOB-TOKEN` header (the body is the trace itself).
    let Some(token) = job_token(&Params::from_query(query.as_deref()), &headers) else {
        return forbidden();
    };
    let start = range_start(&headers);
    let limit = usize::try_from(shared.config.trace_limit)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let body = match read_limited(&headers, body, limit).await {
        Ok(bytes) => Some(bytes),
        Err(ReadBodyError::TooLarge(_)) => None,
        Err(e) => return message(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let reply = shared.mutate(|s| s.append_trace(id, &token, start, body.as_deref()));
    let interval = update_interval_secs(&shared);
    match reply {
        TraceReply::NotFound => not_found(),
        TraceReply::Forbidden => forbidden(),
        TraceReply::NotProcessing(status) => not_processing(status),
        TraceReply::MissingRange => {
            message(StatusCode::BAD_REQUEST, "400 Missing header Content-Range")
        }
        TraceReply::Appended { length, status } => {
            trace_answer(StatusCode::ACCEPTED, length, status, &interval)
        }
        TraceReply::RangeMismatch { length, status } => {
            trace_answer(StatusCode::RANGE_NOT_SATISFIABLE, length, status, &interval)
        }
        TraceReply::SizeExceeded => {
            tracing::info!(job.id = id, "trace over the limit: job failed");
            with_job_status(forbidden(), JobStatus::Failed)
        }
    }
}

fn trace_answer(code: StatusCode, length: u64, status: JobStatus, interval: &str) -> Response {
    let response = with_job_status(code.into_response(), status);
    let response = with_header(response, header::RANGE, &format!("0-{length}"));
    with_header(response, TRACE_UPDATE_INTERVAL, interval)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(range: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(range).unwrap());
        headers
    }

    #[test]
    fn content_range_start() {
        assert_eq!(range_start(&headers("0-9")), Some(0));
        assert_eq!(range_start(&headers("10-19")), Some(10));
        // Exclusive end, garbage and no end: only the start counts, `to_i` style.
        assert_eq!(range_start(&headers("0-43")), Some(0));
        assert_eq!(range_start(&headers("12x-3")), Some(12));
        assert_eq!(range_start(&headers("bytes")), Some(0));
        assert_eq!(range_start(&headers("a-9")), Some(0));
        assert_eq!(range_start(&headers("")), Some(0));
        assert_eq!(range_start(&HeaderMap::new()), None);
    }
}
