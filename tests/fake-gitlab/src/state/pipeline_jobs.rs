//! A project's pipelines as GitLab's REST API lists their jobs
//! (`GET /projects/:id/pipelines/:pipeline_id/jobs`, `lib/api/ci/pipelines.rb` with
//! `Ci::JobsFinder`).
//!
//! The fake has no project or pipeline records: a project exists through the jobs that name it
//! (`project_id`, `project_path`: the payload's `job_info.project_id` and `CI_PROJECT_PATH`) and
//! a pipeline through the jobs that carry its id (`job_info.pipeline_id`, `CI_PIPELINE_ID`). So
//! every job has a pipeline: those of `POST /control/pipelines`, and a job enqueued alone is a
//! one-job pipeline (or joins its first dependency's, or the `pipeline_id` its spec names), and
//! the listing shows exactly the jobs whose payload names that project and pipeline.

use super::State;
use super::api_tokens::ApiRefusal;

/// A project as the API's `:id` names it (`find_project` of `lib/api/helpers.rb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProjectRef {
    /// A number: the project's id (`None`: a number no project can have).
    Id(Option<u64>),
    /// The URL-encoded full path (`group%2Fproject`), compared case-insensitively as GitLab's
    /// `find_by_full_path` does.
    Path(String),
    /// Neither a number nor a path with a `/`: GitLab finds nothing.
    Nothing,
}

impl ProjectRef {
    pub(crate) fn parse(raw: &str) -> Self {
        let digits = raw.strip_prefix('-').unwrap_or(raw);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            ProjectRef::Id(raw.parse().ok())
        } else if raw.contains('/') {
            ProjectRef::Path(raw.to_owned())
        } else {
            ProjectRef::Nothing
        }
    }
}

/// Which of a pipeline's jobs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobsFilter {
    /// GitLab status names (`scope`); `None` lists every status.
    pub scope: Option<Vec<String>>,
    /// Also list jobs that were retried (`include_retried`, default false: only the latest).
    pub include_retried: bool,
}

impl State {
    /// Remembers the project and pipeline a new job belongs to.
    pub(super) fn index_job(&mut self, id: u64) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        self.projects
            .entry(job.spec.project_id)
            .or_insert_with(|| job.spec.project_path.clone());
        self.pipeline_job_ids
            .entry(job.pipeline_id)
            .or_default()
            .push(id);
    }

    pub(super) fn find_project(&self, project: &ProjectRef) -> Option<u64> {
        match project {
            ProjectRef::Id(id) => id.filter(|id| self.projects.contains_key(id)),
            ProjectRef::Path(path) => self
                .projects
                .iter()
                .find(|(_, known)| known.eq_ignore_ascii_case(path))
                .map(|(&id, _)| id),
            ProjectRef::Nothing => None,
        }
    }

    /// The ids of the pipeline's jobs that pass `filter`, newest first (`Ci::JobsFinder`
    /// orders by `id DESC`). `404 Project Not Found` for an unknown project; `404 Not found`
    /// for a pipeline with no job in that project (GitLab's `user_project.all_pipelines.find`).
    /// The caller has authenticated the token.
    pub fn pipeline_job_ids(
        &self,
        project: &ProjectRef,
        pipeline_id: Option<u64>,
        filter: &JobsFilter,
    ) -> Result<Vec<u64>, ApiRefusal> {
        let project_id = self
            .find_project(project)
            .ok_or(ApiRefusal::ProjectNotFound)?;
        let jobs: Vec<_> = pipeline_id
            .and_then(|id| self.pipeline_job_ids.get(&id))
            .into_iter()
            .flatten()
            .filter_map(|id| self.jobs.get(id))
            .filter(|job| job.spec.project_id == project_id)
            .collect();
        if jobs.is_empty() {
            return Err(ApiRefusal::NotFound);
        }
        let wanted = |status: &str| {
            filter
                .scope
                .as_ref()
                .is_none_or(|scope| scope.iter().any(|s| s == status))
        };
        Ok(jobs
            .into_iter()
            .rev()
            .filter(|job| filter.include_retried || job.retried_as.is_none())
            .filter(|job| wanted(job.status.as_gitlab_str()))
            .map(|job| job.id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Instant, SystemTime};

    use super::*;
    use crate::control::{JobSpec, JobStatus};
    use crate::state::entities::{Entity, Render};
    use crate::state::{JobRequest, JobUpdate};

    fn state() -> State {
        crate::state::test_state("glrt-r")
    }

    fn spec(stage: &str, name: &str) -> JobSpec {
        JobSpec {
            project_id: 7,
            project_path: "Web/Shop".into(),
            stage: stage.into(),
            name: name.into(),
            ..JobSpec::new("glrt-r", &["true"])
        }
    }

    fn all() -> JobsFilter {
        JobsFilter::default()
    }

    fn scope(names: &[&str]) -> JobsFilter {
        JobsFilter {
            scope: Some(names.iter().map(|n| (*n).to_owned()).collect()),
            include_retried: false,
        }
    }

    #[test]
    fn projects_are_found_by_id_or_path_and_pipelines_within_them() {
        let mut s = state();
        let now = Instant::now();
        let (pipeline, _) = s
            .create_pipeline(vec![vec![spec("build", "a")]], now)
            .expect("a pipeline");
        let by_path = ProjectRef::parse("web/shop");
        assert_eq!(by_path, ProjectRef::Path("web/shop".into()));
        assert_eq!(
            s.pipeline_job_ids(&by_path, Some(pipeline), &all()),
            Ok(vec![1])
        );
        for unknown in ["8", "shop", "web/other", "-1"] {
            assert_eq!(
                s.pipeline_job_ids(&ProjectRef::parse(unknown), Some(pipeline), &all()),
                Err(ApiRefusal::ProjectNotFound),
                "{unknown}"
            );
        }
        let other = s
            .enqueue(JobSpec::new("glrt-r", &["true"]), now)
            .expect("a job of project 1");
        let theirs = s.jobs[&other.id].pipeline_id;
        assert_eq!(
            s.pipeline_job_ids(&ProjectRef::Id(Some(7)), Some(theirs), &all()),
            Err(ApiRefusal::NotFound),
            "a pipeline of another project"
        );
        assert_eq!(
            s.pipeline_job_ids(&ProjectRef::Id(Some(1)), Some(theirs), &all()),
            Ok(vec![other.id]),
            "a job enqueued alone is a one-job pipeline"
        );
    }

    #[test]
    fn scopes_filter_and_a_stage_goes_from_created_to_pending() {
        let mut s = state();
        let now = Instant::now();
        let stages = vec![
            vec![spec("build", "compile")],
            vec![spec("test", "unit 1/2"), spec("test", "unit 2/2")],
        ];
        let (pipeline, jobs) = s.create_pipeline(stages, now).expect("a pipeline");
        let project = ProjectRef::Id(Some(7));
        let list =
            |s: &State, filter: &JobsFilter| s.pipeline_job_ids(&project, Some(pipeline), filter);
        assert_eq!(list(&s, &scope(&["created"])), Ok(vec![3, 2]));
        assert_eq!(list(&s, &scope(&["pending"])), Ok(vec![1]));
        assert_eq!(list(&s, &scope(&["created", "pending"])), Ok(vec![3, 2, 1]));

        let request = JobRequest {
            token: "glrt-r".into(),
            ..JobRequest::default()
        };
        s.take_job(&request, now).expect("the build job");
        let success = JobUpdate {
            state: "success".into(),
            ..JobUpdate::default()
        };
        s.update_job(jobs[0][0].id, &jobs[0][0].token, &success, now);
        s.advance_pipelines(now);
        assert_eq!(s.job_status(2), Some(JobStatus::Pending));
        assert_eq!(list(&s, &scope(&["created"])), Ok(vec![]));
        assert_eq!(list(&s, &scope(&["pending"])), Ok(vec![3, 2]));
        assert_eq!(list(&s, &scope(&["success"])), Ok(vec![1]));
    }

    #[test]
    fn canceled_jobs_are_finished_and_skipped_ones_are_not() {
        let mut s = state();
        let now = Instant::now();
        let stages = vec![vec![spec("build", "compile")], vec![spec("test", "unit")]];
        s.create_pipeline(stages, now).expect("a pipeline");
        s.stamp_times(SystemTime::now());
        assert_eq!(s.cancel(1, false), Some(JobStatus::Canceled));
        s.advance_pipelines(now);
        s.stamp_times(SystemTime::now());
        let render = Render {
            server_url: "http://gitlab",
            now: SystemTime::now(),
        };
        let shown = s.job_entities(&[2, 1], Entity::Job, &render);
        assert_eq!(shown[0]["status"], "skipped");
        assert!(shown[0]["finished_at"].is_null());
        assert_eq!(shown[1]["status"], "canceled");
        assert!(shown[1]["finished_at"].is_string(), "{}", shown[1]);
        assert_eq!(shown[1]["pipeline"]["status"], "canceled");
    }

    #[test]
    fn the_job_entity_names_its_pipeline_and_runner() {
        let mut s = state();
        let now = Instant::now();
        let stages = vec![vec![spec("build", "compile")], vec![spec("test", "unit")]];
        let (pipeline, _) = s.create_pipeline(stages, now).expect("a pipeline");
        let request = JobRequest {
            token: "glrt-r".into(),
            ..JobRequest::default()
        };
        s.take_job(&request, now).expect("the build job");
        s.stamp_times(SystemTime::now());
        let render = Render {
            server_url: "https://gitlab.example/",
            now: SystemTime::now(),
        };
        let shown = s.job_entities(&[2, 1], Entity::Job, &render);
        let (test, build) = (&shown[0], &shown[1]);
        assert_eq!(test["status"], "created");
        assert!(test["runner"].is_null() && test["started_at"].is_null());
        assert!(test["queued_duration"].is_null(), "never pending yet");
        assert_eq!(build["status"], "running");
        assert_eq!(build["runner"]["id"], 1);
        assert!(build["duration"].is_number(), "grows while running");
        assert!(build["finished_at"].is_null());
        assert_eq!(build["pipeline"]["id"], pipeline);
        assert_eq!(build["pipeline"]["project_id"], 7);
        assert_eq!(build["pipeline"]["status"], "running");
        assert_eq!(build["web_url"], "https://gitlab.example/Web/Shop/-/jobs/1");
        assert!(build.get("failure_reason").is_none(), "only when failed");
        assert_eq!(build["tag_list"], serde_json::json!([]));
    }
}
