//! The part of GitLab's REST API an operator's tools read with an API token:
//! `GET /api/v4/runners/:id/jobs`, offset-paginated as GitLab paginates (`page`, `per_page`,
//! the `X-*` headers and `Link`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{header_str, message};
use crate::shared::Shared;
use crate::state::ApiRefusal;

/// GitLab's `per_page` default and maximum (`Kaminari` settings of the API).
const PER_PAGE_DEFAULT: usize = 20;
const PER_PAGE_MAX: usize = 100;

#[derive(Debug, Deserialize)]
pub(crate) struct JobsQuery {
    page: Option<usize>,
    per_page: Option<usize>,
    sort: Option<String>,
}

/// `GET /api/v4/runners/:id/jobs`: the runner's jobs, newest first unless `sort=asc`.
pub(crate) async fn runner_jobs(
    State(shared): State<Arc<Shared>>,
    Path(runner_id): Path<u64>,
    Query(query): Query<JobsQuery>,
    headers: HeaderMap,
) -> Response {
    let token = header_str(&headers, header::HeaderName::from_static("private-token"))
        .or_else(|| {
            header_str(&headers, header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer "))
        })
        .unwrap_or_default()
        .to_owned();
    let mut jobs = match shared.read(|s| s.runner_jobs(&token, runner_id)) {
        Ok(jobs) => jobs,
        Err(refusal) => return refused(refusal),
    };
    if query.sort.as_deref() == Some("asc") {
        jobs.reverse();
    }
    let per_page = query
        .per_page
        .unwrap_or(PER_PAGE_DEFAULT)
        .clamp(1, PER_PAGE_MAX);
    let page = query.page.unwrap_or(1).max(1);
    let total = jobs.len();
    let pages = total.div_ceil(per_page).max(1);
    let slice: Vec<_> = jobs
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let mut response = Json(slice).into_response();
    let next = if page < pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let prev = if page > 1 {
        (page - 1).to_string()
    } else {
        String::new()
    };
    let h = response.headers_mut();
    for (name, value) in [
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-next-page", next),
        ("x-prev-page", prev),
        ("x-total", total.to_string()),
        ("x-total-pages", pages.to_string()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            h.insert(header::HeaderName::from_static(name), value);
        }
    }
    response
}

/// GitLab's refusals: `401 Unauthorized`, the OAuth-style `insufficient_scope` (403), and
/// `404 Runner Not Found`.
fn refused(refusal: ApiRefusal) -> Response {
    match refusal {
        ApiRefusal::Unauthorized => message(StatusCode::UNAUTHORIZED, "401 Unauthorized"),
        ApiRefusal::InsufficientScope => (
            StatusCode::FORBIDDEN,
            Json(json!({
                "error": "insufficient_scope",
                "error_description": "The request requires higher privileges than provided by the access token.",
                "scope": "api read_api",
            })),
        )
            .into_response(),
        ApiRefusal::RunnerNotFound => message(StatusCode::NOT_FOUND, "404 Runner Not Found"),
    }
}
