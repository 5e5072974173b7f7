//! `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs` ("List pipeline jobs",
//! `lib/api/ci/pipelines.rb`): a pipeline's jobs as GitLab's `Job` entity, newest first,
//! filtered by `scope` and `include_retried`, offset-paginated.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::pagination::{PageLink, Pagination, integer};
use super::{api_token, authenticate_reader, refused};
use crate::api::params::{Params, invalid};
use crate::shared::Shared;
use crate::state::{ApiRefusal, Entity, JobsFilter, ProjectRef, Render};

/// The values `scope` may take: `Ci::HasStatus::AVAILABLE_STATUSES`
/// (`app/models/concerns/ci/has_status.rb`) of the GitLab version the fake claims.
const AVAILABLE_STATUSES: &[&str] = &[
    "created",
    "waiting_for_resource",
    "preparing",
    "waiting_for_callback",
    "pending",
    "running",
    "success",
    "failed",
    "canceling",
    "canceled",
    "skipped",
    "manual",
    "scheduled",
];

/// The request's parameters once Grape has validated and coerced them.
#[derive(Debug)]
struct PipelineJobsQuery {
    /// `None`: a number no pipeline has (negative, or too large).
    pipeline_id: Option<u64>,
    filter: JobsFilter,
    pagination: Pagination,
}

impl PipelineJobsQuery {
    /// Grape's validation, in the order the parameters are declared; every error is reported,
    /// joined by `, `, as Grape's `ValidationErrors` does. Coerced values are written back
    /// into `params` (for the `Link` header).
    fn read(params: &mut Params) -> Result<Self, String> {
        let mut errors = Vec::new();
        let pipeline_id = integer(params, "pipeline_id", &mut errors);
        let include_retried = params.boolean("include_retried").unwrap_or_else(|e| {
            errors.push(e);
            None
        });
        let scope = scope(params, &mut errors);
        let pagination = Pagination::read(params, &mut errors);
        if !errors.is_empty() {
            return Err(errors.join(", "));
        }
        if let Some(id) = pipeline_id {
            params.0.insert("pipeline_id".into(), json!(id));
        }
        let include_retried = include_retried.unwrap_or(false);
        params
            .0
            .insert("include_retried".into(), json!(include_retried));
        if let Some(scope) = &scope {
            params.0.insert("scope".into(), json!(scope));
        }
        Ok(PipelineJobsQuery {
            pipeline_id: pipeline_id.and_then(|id| u64::try_from(id).ok()),
            filter: JobsFilter {
                scope,
                include_retried,
            },
            pagination,
        })
    }
}

/// `scope`: one status or a list of them (`PipelinesHelpers`' `optional_scope`, whose
/// `coerce_with` turns a string into a one-item list and anything else but a list into
/// `['unknown']`); each must be one of [`AVAILABLE_STATUSES`].
fn scope(params: &Params, errors: &mut Vec<String>) -> Option<Vec<String>> {
    let values: Vec<String> = match params.0.get("scope")? {
        Value::Null => return None,
        Value::String(one) => vec![one.clone()],
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().unwrap_or("unknown").to_owned())
            .collect(),
        _ => vec!["unknown".to_owned()],
    };
    if values
        .iter()
        .any(|value| !AVAILABLE_STATUSES.contains(&value.as_str()))
    {
        errors.push("scope does not have a valid value".to_owned());
    }
    Some(values)
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs`. `:id` is the project's id or its
/// URL-encoded full path (`group%2Fproject`).
pub(crate) async fn pipeline_jobs(
    State(shared): State<Arc<Shared>>,
    Path((project, pipeline)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let mut params = Params::from_query(uri.query());
    // Grape merges the route's parameters over the query's.
    params.0.insert("id".into(), Value::String(project.clone()));
    params
        .0
        .insert("pipeline_id".into(), Value::String(pipeline));
    // The parameters are validated first: this API authenticates a `GET` only when the
    // endpoint asks for the user (`authenticate_non_get!`).
    let query = match PipelineJobsQuery::read(&mut params) {
        Ok(query) => query,
        Err(error) => return invalid(&error),
    };
    // Without a token the reader is anonymous, and the fake's projects are private
    // (`CI_PROJECT_VISIBILITY`): GitLab hides them as `404 Project Not Found`, not `401`.
    let Some(token) = api_token(&headers) else {
        return refused(ApiRefusal::ProjectNotFound);
    };
    if let Err(refusal) = authenticate_reader(&shared, &token) {
        return refused(refusal);
    }
    let render = Render {
        server_url: &shared.server_url,
        now: SystemTime::now(),
    };
    let project = ProjectRef::parse(&project);
    let listed = shared.read(|s| {
        let ids = s.pipeline_job_ids(&project, query.pipeline_id, &query.filter)?;
        let window = query.pagination.window(ids.len());
        Ok::<_, ApiRefusal>((
            s.job_entities(&ids[window], Entity::Job, &render),
            ids.len(),
        ))
    });
    match listed {
        Ok((jobs, total)) => {
            let link = PageLink::new(&shared.server_url, uri.path(), &params);
            query.pagination.respond(jobs, total, &link)
        }
        Err(refusal) => refused(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(query: &str) -> Result<PipelineJobsQuery, String> {
        let mut params = Params::from_query(Some(query));
        params.0.insert("pipeline_id".into(), json!("12"));
        PipelineJobsQuery::read(&mut params)
    }

    #[test]
    fn scope_is_one_status_or_a_list_of_them() {
        let one = read("scope=created").expect("valid");
        assert_eq!(one.filter.scope, Some(vec!["created".to_owned()]));
        let two = read("scope[]=created&scope[]=pending").expect("valid");
        assert_eq!(
            two.filter.scope,
            Some(vec!["created".to_owned(), "pending".to_owned()])
        );
        assert_eq!(
            read("scope=created&scope=pending")
                .expect("valid")
                .filter
                .scope,
            Some(vec!["pending".to_owned()]),
            "Rack keeps the last of a plain key"
        );
        for bad in [
            "scope=bogus",
            "scope[]=created&scope[]=bogus",
            "scope[a]=created",
        ] {
            assert_eq!(
                read(bad).err().as_deref(),
                Some("scope does not have a valid value"),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_invalid_parameter_is_reported() {
        let mut params = Params::from_query(Some("include_retried=maybe&page=x"));
        params.0.insert("pipeline_id".into(), json!("abc"));
        assert_eq!(
            PipelineJobsQuery::read(&mut params).err().as_deref(),
            Some("pipeline_id is invalid, include_retried is invalid, page is invalid")
        );
        let query = read("include_retried=true").expect("valid");
        assert_eq!(query.pipeline_id, Some(12));
        assert!(query.filter.include_retried && query.filter.scope.is_none());
    }
}
