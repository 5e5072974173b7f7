//! Jobs as GitLab's REST API shows them, its Grape entities (`lib/api/entities/ci/`):
//! `JobBasic` with the runner's view of the project (`GET /runners/:id/jobs`) or the full `Job`
//! (`GET /projects/:id/pipelines/:pipeline_id/jobs`), each with its `PipelineBasic`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::control::JobStatus;

use super::{Job, State};

/// What a rendering needs from outside the state: the URL users reach GitLab at (`web_url`)
/// and the time (a running job's `duration` grows).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Render<'a> {
    pub server_url: &'a str,
    pub now: SystemTime,
}

impl Render<'_> {
    fn project_url(&self, job: &Job) -> String {
        format!(
            "{}/{}",
            self.server_url.trim_end_matches('/'),
            job.spec.project_path
        )
    }
}

/// Which entity a job is shown with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entity {
    /// `JobBasicWithProject` (`GET /runners/:id/jobs`).
    RunnerJob,
    /// `Job` (`GET /projects/:id/pipelines/:pipeline_id/jobs`).
    Job,
}

/// GitLab's time format in the REST API: ISO 8601 with milliseconds, in UTC.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `calculate_duration` of GitLab's `Ci::HasStatus`: from `from` to `to`, or to now while `to`
/// is unset (a running job's `duration`, a pending job's `queued_duration`); null before `from`.
fn seconds(from: Option<SystemTime>, to: Option<SystemTime>, now: SystemTime) -> Value {
    match from {
        Some(from) => to
            .unwrap_or(now)
            .duration_since(from)
            .map_or(json!(0.0), |d| json!(d.as_secs_f64())),
        None => Value::Null,
    }
}

/// `Gitlab::Ci::Status::Composite#status` (`lib/gitlab/ci/status/composite.rb`) over the
/// statuses the fake has (no `allow_failure`, `manual`, `scheduled`, `preparing` or
/// `waiting_for_*` jobs): how a pipeline stands from its latest jobs.
pub(crate) fn composite_status(statuses: &BTreeSet<&str>) -> &'static str {
    let only = |names: &[&str]| !statuses.is_empty() && statuses.iter().all(|s| names.contains(s));
    let any = |names: &[&str]| names.iter().any(|name| statuses.contains(name));
    if only(&["skipped"]) {
        "skipped"
    } else if only(&["success", "skipped"]) {
        "success"
    } else if only(&["created"]) {
        "created"
    } else if only(&["canceled", "success", "skipped"]) {
        "canceled"
    } else if only(&["pending", "created", "skipped"]) {
        "pending"
    } else if any(&["running", "pending", "created"]) {
        "running"
    } else if any(&["canceling"]) {
        "canceling"
    } else {
        "failed"
    }
}

impl State {
    /// The jobs `ids` shown with `entity`; a pipeline shared by several of them is worked out
    /// once.
    pub fn job_entities(&self, ids: &[u64], entity: Entity, render: &Render) -> Vec<Value> {
        let mut pipelines = BTreeMap::new();
        ids.iter()
            .filter_map(|id| self.jobs.get(id))
            .map(|job| {
                let pipeline = pipelines
                    .entry((job.pipeline_id, job.spec.project_id))
                    .or_insert_with(|| self.pipeline_json(job, render))
                    .clone();
                let mut fields = self.job_basic(job, pipeline, render);
                match entity {
                    Entity::RunnerJob => {
                        fields.insert("project".into(), project_identity(job));
                    }
                    Entity::Job => fields.extend(self.job_extras(job)),
                }
                Value::Object(fields)
            })
            .collect()
    }

    /// `JobBasic` (`lib/api/entities/ci/job_basic.rb`).
    fn job_basic(&self, job: &Job, pipeline: Value, render: &Render) -> Map<String, Value> {
        let times = self.times.get(&job.id);
        let created = times.map(|t| t.created);
        let queued = times.and_then(|t| t.queued);
        let started = times.and_then(|t| t.started);
        let finished = times.and_then(|t| t.finished);
        let project_url = render.project_url(job);
        let commit = commit_json(job, &project_url, pipeline["created_at"].clone());
        let Value::Object(mut fields) = json!({
            "id": job.id,
            "status": job.status.as_gitlab_str(),
            "stage": job.spec.stage,
            "name": job.spec.name,
            "ref": job.spec.git_ref,
            "tag": false,
            "coverage": null,
            "allow_failure": false,
            "created_at": created.map(rfc3339),
            "started_at": started.map(rfc3339),
            "finished_at": finished.map(rfc3339),
            "erased_at": null,
            "duration": seconds(started, finished, render.now),
            // From pending to running, as GitLab's `queued_duration` (`started_at - queued_at`).
            "queued_duration": seconds(queued, started, render.now),
            "user": user_json(render),
            "commit": commit,
            "pipeline": pipeline,
            "web_url": format!("{project_url}/-/jobs/{}", job.id),
            "project": {"ci_job_token_scope_enabled": false},
        }) else {
            return Map::new();
        };
        // Exposed only `if: job.failed?`.
        if job.status == JobStatus::Failed {
            fields.insert("failure_reason".into(), json!(job.failure_reason));
        }
        fields
    }

    /// What `Job` (`lib/api/entities/ci/job.rb`) adds to `JobBasic`.
    fn job_extras(&self, job: &Job) -> Map<String, Value> {
        let artifacts: Vec<Value> = job
            .artifacts
            .values()
            .map(|a| {
                json!({
                    "file_type": a.artifact_type,
                    "size": a.size,
                    "filename": a.filename,
                    "file_format": a.artifact_format,
                })
            })
            .collect();
        let mut tags = job.spec.tags.clone();
        tags.sort();
        let mut extras = Map::new();
        if let Some(archive) = job.artifacts.get("archive") {
            extras.insert(
                "artifacts_file".into(),
                json!({"filename": archive.filename, "size": archive.size}),
            );
        }
        extras.insert("artifacts".into(), Value::Array(artifacts));
        extras.insert("runner".into(), self.runner_json(job));
        // GitLab names the runner manager (`system_id`) that took the job; the fake gives its
        // managers no ids, so it answers as for a job no manager took.
        extras.insert("runner_manager".into(), Value::Null);
        extras.insert("artifacts_expire_at".into(), Value::Null);
        extras.insert("archived".into(), Value::Bool(false));
        extras.insert("tag_list".into(), json!(tags));
        extras
    }

    /// `Ci::Runner` (`lib/api/entities/ci/runner.rb`) of the runner that took the job, null
    /// before one did (GitLab sets `runner_id` when it assigns the job).
    fn runner_json(&self, job: &Job) -> Value {
        let runner = self.runners.get(&job.spec.runner_token);
        match runner.filter(|_| job.handouts > 0) {
            Some(runner) => json!({
                "id": runner.id,
                "description": runner.description,
                "ip_address": null,
                "active": true,
                "paused": false,
                // The fake's runners take any project's jobs, as instance runners do.
                "is_shared": true,
                "runner_type": "instance_type",
                "name": null,
                "online": true,
                "status": "online",
            }),
            None => Value::Null,
        }
    }

    /// `PipelineBasic` of the job's pipeline: its status is the composite of its latest jobs
    /// (a retried job counts by its retry) in the job's project.
    fn pipeline_json(&self, job: &Job, render: &Render) -> Value {
        let jobs: Vec<&Job> = self
            .pipeline_job_ids
            .get(&job.pipeline_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.jobs.get(id))
            .filter(|other| other.spec.project_id == job.spec.project_id)
            .collect();
        let statuses: BTreeSet<&str> = jobs
            .iter()
            .filter(|other| other.retried_as.is_none())
            .map(|other| other.status.as_gitlab_str())
            .collect();
        let stamps = jobs.iter().filter_map(|other| self.times.get(&other.id));
        let created = stamps.clone().map(|t| t.created).min();
        let updated = stamps.flat_map(|t| t.stamps()).max();
        json!({
            "id": job.pipeline_id,
            "iid": job.pipeline_id,
            "project_id": job.spec.project_id,
            "sha": job.sha,
            "ref": job.spec.git_ref,
            "status": composite_status(&statuses),
            "source": "push",
            "created_at": created.map(rfc3339),
            "updated_at": updated.map(rfc3339),
            "web_url": format!("{}/-/pipelines/{}", render.project_url(job), job.pipeline_id),
        })
    }
}

/// The runner API's view of the project (`JobBasicWithProject`), as before.
fn project_identity(job: &Job) -> Value {
    json!({
        "id": job.spec.project_id,
        "path_with_namespace": job.spec.project_path,
        "name": job.spec.project_path.rsplit('/').next(),
    })
}

/// The user every job runs for (`GITLAB_USER_*` of the payload), the fields of GitLab's
/// `UserBasic` that do not need a profile.
pub(super) fn user_json(render: &Render) -> Value {
    json!({
        "id": 1,
        "username": "root",
        "name": "Administrator",
        "state": "active",
        "locked": false,
        "avatar_url": null,
        "web_url": format!("{}/root", render.server_url.trim_end_matches('/')),
    })
}

/// GitLab's `Commit` entity for the job's `sha`, with the title, message and author the
/// payload's `CI_COMMIT_*` variables give; dated when its pipeline was created.
fn commit_json(job: &Job, project_url: &str, created_at: Value) -> Value {
    json!({
        "id": job.sha,
        "short_id": job.sha.chars().take(8).collect::<String>(),
        "created_at": created_at,
        "parent_ids": [],
        "title": "Commit under test",
        "message": "Commit under test",
        "author_name": "Administrator",
        "author_email": "admin@example.com",
        "authored_date": created_at,
        "committer_name": "Administrator",
        "committer_email": "admin@example.com",
        "committed_date": created_at,
        "trailers": {},
        "extended_trailers": {},
        "web_url": format!("{project_url}/-/commit/{}", job.sha),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_of(statuses: &[&str]) -> &'static str {
        composite_status(&statuses.iter().copied().collect())
    }

    #[test]
    fn a_pipeline_stands_as_gitlab_composes_its_jobs() {
        assert_eq!(status_of(&["pending", "created"]), "pending");
        assert_eq!(status_of(&["success", "created"]), "running");
        assert_eq!(status_of(&["success", "pending", "created"]), "running");
        assert_eq!(status_of(&["failed", "running"]), "running");
        assert_eq!(status_of(&["failed", "skipped"]), "failed");
        assert_eq!(status_of(&["success", "skipped"]), "success");
        assert_eq!(status_of(&["canceled", "success"]), "canceled");
        assert_eq!(status_of(&["canceling", "success"]), "canceling");
        assert_eq!(status_of(&["created"]), "created");
    }
}
