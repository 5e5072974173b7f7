//! `GET /api/v4/projects/:id/pipeline_schedules` ("Get all pipeline schedules",
//! `lib/api/ci/pipeline_schedules.rb`): a project's schedules as GitLab's `PipelineSchedule`
//! entity, newest first, `scope` `active` or `inactive`, offset-paginated. That API
//! authenticates every request first (`before { authenticate! }`): no token is `401`, unlike
//! the pipeline jobs' lazy authentication.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::Value;

use super::pagination::{PageLink, Pagination};
use super::{api_token, authenticate_reader, refused};
use crate::api::params::{Params, invalid};
use crate::shared::Shared;
use crate::state::{ApiRefusal, ProjectRef, Render};

/// `scope`'s values (`values: %w[active inactive]`).
const SCOPES: &[&str] = &["active", "inactive"];

/// Grape's validation of `scope` and the pagination, every error joined by `, `.
fn read(params: &mut Params) -> Result<(Option<String>, Pagination), String> {
    let mut errors = Vec::new();
    let scope = match params.0.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if SCOPES.contains(&s.as_str()) => Some(s.clone()),
        Some(_) => {
            errors.push("scope does not have a valid value".to_owned());
            None
        }
    };
    let pagination = Pagination::read(params, &mut errors);
    if errors.is_empty() {
        Ok((scope, pagination))
    } else {
        Err(errors.join(", "))
    }
}

/// `GET /api/v4/projects/:id/pipeline_schedules`. `:id` is the project's id or its URL-encoded
/// full path.
pub(crate) async fn pipeline_schedules(
    State(shared): State<Arc<Shared>>,
    Path(project): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let Some(token) = api_token(&headers) else {
        return refused(ApiRefusal::Unauthorized);
    };
    if let Err(refusal) = authenticate_reader(&shared, &token) {
        return refused(refusal);
    }
    let mut params = Params::from_query(uri.query());
    params.0.insert("id".into(), Value::String(project.clone()));
    let (scope, pagination) = match read(&mut params) {
        Ok(read) => read,
        Err(error) => return invalid(&error),
    };
    let render = Render {
        server_url: &shared.server_url,
        now: SystemTime::now(),
    };
    let project = ProjectRef::parse(&project);
    let listed = shared.read(|s| s.schedule_entities(&project, scope.as_deref(), &render));
    match listed {
        Ok(mut schedules) => {
            let total = schedules.len();
            let page: Vec<Value> = schedules.drain(pagination.window(total)).collect();
            let link = PageLink::new(&shared.server_url, uri.path(), &params);
            pagination.respond(page, total, &link)
        }
        Err(refusal) => refused(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_active_or_inactive() {
        let scope = |query: &str| read(&mut Params::from_query(Some(query))).map(|(s, _)| s);
        assert_eq!(scope("scope=active"), Ok(Some("active".to_owned())));
        assert_eq!(scope(""), Ok(None));
        assert_eq!(
            scope("scope=all&page=x"),
            Err("scope does not have a valid value, page is invalid".to_owned())
        );
    }
}
