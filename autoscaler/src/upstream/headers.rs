//! Which headers cross the relay, in each direction.
//!
//! Both lists are allow-lists: a header that is not named here does not cross. That keeps hop
//! headers, cookies and any credential other than the job token out of GitLab's view, and keeps
//! GitLab's internal headers away from the sidecars.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName};

/// Sidecar → GitLab, on job calls (`PUT`, `PATCH .../trace`, artifacts).
const REQUEST: &[&str] = &[
    "job-token",
    "content-type",
    "content-range",
    "accept",
    "user-agent",
    "x-request-id",
];

/// GitLab → sidecar: what runners and their helpers read (runner-protocol.md §4–§7, §11).
const RESPONSE: &[&str] = &[
    "content-type",
    "content-length",
    "content-disposition",
    "job-status",
    "range",
    "x-gitlab-trace-update-interval",
    "retry-after",
    "ratelimit-resettime",
    "location",
    "x-request-id",
];

fn filter(from: &HeaderMap, allowed: &[&'static str]) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in allowed {
        let name = HeaderName::from_static(name);
        for value in from.get_all(&name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

pub fn filter_request_headers(from: &HeaderMap) -> HeaderMap {
    filter(from, REQUEST)
}

pub fn filter_response_headers(from: &HeaderMap) -> HeaderMap {
    filter(from, RESPONSE)
}

/// When GitLab asked us to come back: `RateLimit-ResetTime` (an HTTP date) if in the future,
/// else `Retry-After` in whole seconds (the forms the runner honours, runner-protocol.md §1.1).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let reset = headers
        .get("ratelimit-resettime")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok())
        .and_then(|at| at.duration_since(now).ok())
        .filter(|d| !d.is_zero());
    reset.or_else(|| {
        headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    })
}

/// The stored trace length GitLab reports as `Range: 0-<length>` (trace answers `202`/`416`).
pub fn range_end(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get("range")?
        .to_str()
        .ok()?
        .split_once('-')
        .and_then(|(_, n)| n.trim().parse::<u64>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn runner_and_private_tokens_never_cross() {
        let mut h = HeaderMap::new();
        h.insert("job-token", HeaderValue::from_static("glcbt-x"));
        h.insert("runner-token", HeaderValue::from_static("glrt-secret"));
        h.insert("private-token", HeaderValue::from_static("glpat-secret"));
        h.insert("authorization", HeaderValue::from_static("Bearer x"));
        h.insert("cookie", HeaderValue::from_static("a=b"));
        h.insert("content-range", HeaderValue::from_static("0-9"));
        let out = filter_request_headers(&h);
        assert_eq!(out.len(), 2);
        assert!(out.contains_key("job-token") && out.contains_key("content-range"));
    }

    #[test]
    fn runner_relevant_response_headers_cross() {
        let mut h = HeaderMap::new();
        h.insert("job-status", HeaderValue::from_static("canceling"));
        h.insert("range", HeaderValue::from_static("0-10"));
        h.insert(
            "x-gitlab-trace-update-interval",
            HeaderValue::from_static("3"),
        );
        h.insert("set-cookie", HeaderValue::from_static("_gitlab_session=x"));
        h.insert("x-runtime", HeaderValue::from_static("0.1"));
        let out = filter_response_headers(&h);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn retry_after_prefers_a_future_reset_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        let reset = httpdate::fmt_http_date(now + Duration::from_secs(30));
        h.insert(
            "ratelimit-resettime",
            HeaderValue::from_str(&reset).unwrap(),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        h.insert("ratelimit-resettime", HeaderValue::from_str(&past).unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
