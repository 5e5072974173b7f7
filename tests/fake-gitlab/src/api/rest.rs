//! The part of GitLab's REST API an operator's tools read with an access token:
//! `GET /api/v4/runners/:id/jobs`, `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs`
//! (in `pipelines`), `GET /api/v4/projects/:id/pipeline_schedules` (in `schedules`) and
//! `GET /api/v4/personal_access_tokens/self`; lists are offset-paginated
//! as GitLab paginates them (`pagination`).

mod pagination;
mod pipelines;
mod schedules;

pub(crate) use pipelines::pipeline_jobs;
pub(crate) use schedules::pipeline_schedules;

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::params::{Params, invalid};
use super::{header_str, message};
use crate::shared::Shared;
use crate::state::{ApiRefusal, Entity, Render};
use pagination::{PageLink, Pagination, integer};

/// The access token of a request: `PRIVATE-TOKEN`, else `Authorization: Bearer` (GitLab takes a
/// personal access token as an OAuth bearer token too).
fn api_token(headers: &HeaderMap) -> Option<String> {
    header_str(headers, header::HeaderName::from_static("private-token"))
        .or_else(|| {
            header_str(headers, header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer "))
        })
        .map(str::to_owned)
}

/// Authenticates `token` for a read: `401` unless it is known, `403` unless it has `read_api`
/// or `api`. Its `last_used_at` is written either way, as GitLab does on authentication.
fn authenticate_reader(shared: &Shared, token: &str) -> Result<(), ApiRefusal> {
    let now = SystemTime::now();
    shared.mutate(|s| {
        s.use_api_token(token, now)?;
        s.may_read_api(token)
    })
}

/// GitLab's refusals: `401 Unauthorized`, the OAuth-style `insufficient_scope` (403), and the
/// `404`s of `not_found!` (`404 <Thing> Not Found`) and of `ActiveRecord::RecordNotFound`.
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
        ApiRefusal::ProjectNotFound => message(StatusCode::NOT_FOUND, "404 Project Not Found"),
        ApiRefusal::NotFound => message(StatusCode::NOT_FOUND, "404 Not found"),
    }
}

/// `GET /api/v4/runners/:id/jobs` (`lib/api/ci/runners.rb`): the jobs that reached the runner,
/// newest first unless `sort=asc`, as GitLab's `JobBasicWithProject`.
pub(crate) async fn runner_jobs(
    State(shared): State<Arc<Shared>>,
    Path(runner): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    // The runners API authenticates before it validates (`before { authenticate! }`).
    let token = api_token(&headers).unwrap_or_default();
    if let Err(refusal) = authenticate_reader(&shared, &token) {
        return refused(refusal);
    }
    let mut params = Params::from_query(uri.query());
    params.0.insert("id".into(), Value::String(runner));
    let mut errors = Vec::new();
    let runner_id = integer(&params, "id", &mut errors);
    let pagination = Pagination::read(&mut params, &mut errors);
    if !errors.is_empty() {
        return invalid(&errors.join(", "));
    }
    let ascending = params.string("sort").as_deref() == Some("asc");
    if let Some(id) = runner_id {
        params.0.insert("id".into(), json!(id));
    }
    let render = Render {
        server_url: &shared.server_url,
        now: SystemTime::now(),
    };
    let runner_id = runner_id.and_then(|id| u64::try_from(id).ok());
    let listed = shared.read(|s| {
        let mut ids =
            runner_id.map_or(Err(ApiRefusal::RunnerNotFound), |id| s.runner_job_ids(id))?;
        if ascending {
            ids.reverse();
        }
        let window = pagination.window(ids.len());
        Ok::<_, ApiRefusal>((
            s.job_entities(&ids[window], Entity::RunnerJob, &render),
            ids.len(),
        ))
    });
    match listed {
        Ok((jobs, total)) => {
            let link = PageLink::new(&shared.server_url, uri.path(), &params);
            pagination.respond(jobs, total, &link)
        }
        Err(refusal) => refused(refusal),
    }
}

/// `GET /api/v4/personal_access_tokens/self` (`lib/api/personal_access_tokens/
/// self_information.rb`): the token describes itself, whatever its scopes; `401` without a
/// known token.
pub(crate) async fn token_self(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let token = api_token(&headers).unwrap_or_default();
    let now = SystemTime::now();
    let described = shared.mutate(|s| {
        s.use_api_token(&token, now)
            .ok()
            .and_then(|()| s.api_token_json(&token))
    });
    match described {
        Some(described) => Json(described).into_response(),
        None => refused(ApiRefusal::Unauthorized),
    }
}
