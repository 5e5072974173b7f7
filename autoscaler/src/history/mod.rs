//! `autoscaler history`: a runner's finished jobs, read from GitLab's REST API and written as
//! a replay file (`simulate::replay`), so that an operator can replay their own week against
//! any policy with `autoscaler simulate`.
//!
//! The endpoint is `GET /api/v4/runners/:id/jobs` (GitLab's `lib/api/ci/runners.rb`), asked
//! newest first (`order_by=id&sort=desc`; `sort` alone is ignored without `order_by`) a page
//! of 100 at a time (`page`, `X-Next-Page`). The token goes in `PRIVATE-TOKEN`; it needs the
//! `read_api` scope (or `api`) and a user who may see the runner. Reading stops at the last
//! page, or at the first page whose jobs were all created before `--since`.
//!
//! GitLab's API is rate-limited: a `429` is waited out (its `Retry-After`, else its
//! `RateLimit-Reset`, else a minute), and a `5xx` or a failed connection is retried with a
//! doubling backoff; each request has a timeout. After [`MAX_RETRIES`] the export fails
//! rather than write a partial week.

pub mod replay_line;

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::Value;

use replay_line::{ReplayJob, Skipped};

use crate::clock::Clock;
use crate::gitlab_api::{
    self, FIRST_BACKOFF, error_message, next_backoff, next_page, rate_limit_wait,
};

/// Jobs per page: GitLab's maximum.
const PER_PAGE: u32 = 100;
/// Each request's limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of one page (429, 5xx, connection failures) before the export fails.
pub const MAX_RETRIES: u32 = 8;

/// What to export.
#[derive(Debug, Clone)]
pub struct HistoryRequest {
    /// GitLab's base URL (`https://gitlab.example.com`).
    pub url: String,
    pub runner: u64,
    /// An access token with `read_api`.
    pub token: String,
    /// Jobs that became pending before this are left out.
    pub since: Option<DateTime<Utc>>,
    /// The replay's `class` column for every job.
    pub class: String,
}

/// The replay and what was left out of it.
#[derive(Debug)]
pub struct Export {
    pub replay: String,
    pub jobs: usize,
    pub unfinished: usize,
    pub never_started: usize,
    pub pages: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("GitLab refused the API token ({status}): {message}")]
    Refused { status: StatusCode, message: String },
    #[error("GitLab knows no runner {runner} that this token may see (404): {message}")]
    NotFound { runner: u64, message: String },
    #[error("GitLab did not answer page {page} after {MAX_RETRIES} retries: {last}")]
    Unavailable { page: u32, last: String },
    #[error("GitLab's answer for page {page} is not what its API documents: {problem}")]
    BadAnswer { page: u32, problem: String },
    #[error("cannot make an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Reads the runner's jobs page by page and writes them as a replay.
pub async fn export(request: &HistoryRequest, clock: &dyn Clock) -> Result<Export, HistoryError> {
    let http = gitlab_api::client(REQUEST_TIMEOUT).map_err(HistoryError::Client)?;
    let mut jobs: Vec<ReplayJob> = Vec::new();
    let (mut unfinished, mut never_started, mut pages) = (0, 0, 0);
    let mut page = Some(1);
    while let Some(number) = page {
        let (body, next) = fetch_page(&http, request, number, clock).await?;
        pages += 1;
        let Value::Array(items) = body else {
            return Err(bad(number, "the body is not a JSON array"));
        };
        let mut any_recent = items.is_empty();
        for item in &items {
            any_recent |= created_since(item, request.since);
            match replay_line::from_api(item).map_err(|problem| bad(number, &problem))? {
                Ok(job) if request.since.is_none_or(|since| job.ready >= since) => jobs.push(job),
                Ok(_) => {}
                Err(Skipped::Unfinished) => unfinished += 1,
                Err(Skipped::NeverStarted) => never_started += 1,
            }
        }
        page = next.filter(|_| any_recent);
    }
    let count = jobs.len();
    Ok(Export {
        replay: replay_line::write(&mut jobs, &request.class),
        jobs: count,
        unfinished,
        never_started,
        pages,
    })
}

fn bad(page: u32, problem: &str) -> HistoryError {
    HistoryError::BadAnswer {
        page,
        problem: problem.to_string(),
    }
}

/// Whether `job` was created at or after `since` (or there is no `since`).
fn created_since(job: &Value, since: Option<DateTime<Utc>>) -> bool {
    let Some(since) = since else { return true };
    job["created_at"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| t >= since)
}

/// One page, retried through rate limits and outages: its body and the next page's number.
async fn fetch_page(
    http: &reqwest::Client,
    request: &HistoryRequest,
    page: u32,
    clock: &dyn Clock,
) -> Result<(Value, Option<u32>), HistoryError> {
    let url = format!(
        "{}/api/v4/runners/{}/jobs?order_by=id&sort=desc&per_page={PER_PAGE}&page={page}",
        request.url.trim_end_matches('/'),
        request.runner
    );
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for _ in 0..=MAX_RETRIES {
        let sent = http
            .get(&url)
            .header("PRIVATE-TOKEN", &request.token)
            .send()
            .await;
        let wait = match sent {
            Err(e) => {
                last = format!("request failed: {e}");
                next_backoff(&mut backoff)
            }
            Ok(answer) => match answer.status() {
                s if s.is_success() => {
                    let next = next_page(answer.headers());
                    let body = answer
                        .json()
                        .await
                        .map_err(|e| bad(page, &format!("not JSON ({e})")))?;
                    return Ok((body, next));
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    last = "429 Too Many Requests".into();
                    rate_limit_wait(answer.headers(), clock.now() / 1000)
                }
                s if s.is_server_error() => {
                    last = format!("{s}");
                    next_backoff(&mut backoff)
                }
                s => return Err(refusal(s, request.runner, answer.text().await)),
            },
        };
        tracing::warn!(page, wait_s = wait.as_secs_f64(), reason = %last, "GitLab's API did not answer the page; retrying");
        tokio::time::sleep(wait).await;
    }
    Err(HistoryError::Unavailable { page, last })
}

/// A 4xx that no retry mends.
fn refusal(status: StatusCode, runner: u64, body: reqwest::Result<String>) -> HistoryError {
    let message = error_message(&body.unwrap_or_default());
    match status {
        StatusCode::NOT_FOUND => HistoryError::NotFound { runner, message },
        StatusCode::FORBIDDEN => HistoryError::Refused {
            status,
            message: format!(
                "{message} (the token needs the read_api scope, and its user must be able to \
                 see runner {runner}: an administrator for an instance runner, a maintainer \
                 or owner of its group or project otherwise)"
            ),
        },
        _ => HistoryError::Refused { status, message },
    }
}
