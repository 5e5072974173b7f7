//! What reading GitLab's REST API with an operator's access token needs, shared by
//! `autoscaler history` and the pipeline look-ahead: the HTTP client, offset pagination
//! (`X-Next-Page`), the waits a `429` or an outage asks for, and GitLab's error bodies.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::Value;

/// The first backoff after a 5xx or a failed connection; doubled each time, at most a minute.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// A 429 without `Retry-After` or `RateLimit-Reset` waits this long.
pub const RATE_LIMIT_DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// An HTTP client for GitLab's REST API, each request limited to `timeout`.
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!(
            "gitlab-runner-autoscaler/",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
}

/// The wait before the next try after a 5xx or a failed connection: `backoff`, which doubles.
pub fn next_backoff(backoff: &mut Duration) -> Duration {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(Duration::from_secs(60));
    wait
}

/// `X-Next-Page`: empty on the last page.
pub fn next_page(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("x-next-page")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// How long a 429 asks to wait: `Retry-After` seconds, else until `RateLimit-Reset` (a Unix
/// time), else a minute.
pub fn rate_limit_wait(headers: &HeaderMap, now_s: u64) -> Duration {
    let number = |name| {
        headers
            .get(name)
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(seconds) = number(RETRY_AFTER.as_str()) {
        return Duration::from_secs(seconds);
    }
    if let Some(reset) = number("ratelimit-reset") {
        return Duration::from_secs(reset.saturating_sub(now_s).max(1));
    }
    RATE_LIMIT_DEFAULT_WAIT
}

/// What an error body says: Grape's `{"message": ...}`, or the OAuth-style `{"error",
/// "error_description"}` of a token without the scope; the body itself otherwise.
pub fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| match (v["message"].as_str(), v["error"].as_str()) {
            (Some(message), _) => Some(message.to_string()),
            (None, Some(error)) => Some(match v["error_description"].as_str() {
                Some(description) => format!("{error}: {description}"),
                None => error.to_string(),
            }),
            (None, None) => None,
        })
        .unwrap_or_else(|| body.to_string())
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn a_429_waits_as_gitlab_asks_and_a_minute_when_it_does_not_say() {
        let mut headers = HeaderMap::new();
        assert_eq!(rate_limit_wait(&headers, 1_000), RATE_LIMIT_DEFAULT_WAIT);
        headers.insert("ratelimit-reset", HeaderValue::from_static("1030"));
        assert_eq!(rate_limit_wait(&headers, 1_000), Duration::from_secs(30));
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(rate_limit_wait(&headers, 1_000), Duration::from_secs(7));
    }

    #[test]
    fn the_backoff_doubles_up_to_a_minute() {
        let mut backoff = FIRST_BACKOFF;
        let waits: Vec<u64> = (0..8)
            .map(|_| next_backoff(&mut backoff).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn gitlab_error_bodies_say_what_went_wrong() {
        assert_eq!(
            error_message(r#"{"message":"404 Not found"}"#),
            "404 Not found"
        );
        let scope = r#"{"error":"insufficient_scope","error_description":"needs read_api"}"#;
        assert_eq!(error_message(scope), "insufficient_scope: needs read_api");
        assert_eq!(error_message("gateway timeout"), "gateway timeout");
    }
}
