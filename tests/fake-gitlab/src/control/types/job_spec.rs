//! What a test asks the fake to queue (`POST /control/jobs` and `/control/jobs/batch`): the job
//! spec with its variables and artifact entries, and their defaults.

use serde::{Deserialize, Serialize};

/// What a test asks the fake to queue (`POST /control/jobs`).
///
/// Only `runner_token` and `script` are required; everything else has the defaults of
/// [`JobSpec::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSpec {
    /// The runner token whose queue receives the job.
    pub runner_token: String,
    pub name: String,
    pub stage: String,
    pub project_id: u64,
    pub project_path: String,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    pub variables: Vec<JobVariable>,
    pub artifacts: Vec<ArtifactSpec>,
    /// Ids of earlier jobs whose `archive` artifacts this job downloads.
    pub dependencies: Vec<u64>,
    /// Job timeout in seconds (`runner_info.timeout`).
    pub timeout: u64,
    /// Clone URL; without it the job carries `GIT_STRATEGY=none`.
    pub repo_url: Option<String>,
    /// `info.features` keys the runner must advertise as `true`, else the job is dropped as
    /// `runner_unsupported` (runner-protocol.md §3.1).
    pub required_features: Vec<String>,
    /// How many final `PUT`s of this job are answered `202` before the `200`.
    pub final_put_202: u32,
    /// `git_info.ref` (default `main`). Addition to the README's original spec.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// `git_info.sha`; default: a random commit id. Set it when `repo_url` points at a real
    /// repository, since the runner checks this commit out.
    pub sha: Option<String>,
    /// Pipeline id; default: the first dependency's pipeline, else a new one.
    pub pipeline_id: Option<u64>,
    /// `image.name`; default: no image (`"image": null`).
    pub image: Option<String>,
    /// `services[].name`.
    pub services: Vec<String>,
    /// The job's `tags:`, shown as `tag_list` by the REST API (`GET /projects/:id/pipelines/
    /// :pipeline_id/jobs`) so that a reader can foresee which runners a job needs. The queue
    /// ignores them: a job goes to its `runner_token`.
    pub tags: Vec<String>,
    /// `CI_PIPELINE_SOURCE` (default `push`; `schedule` for a pipeline a schedule made).
    pub pipeline_source: String,
}

impl JobSpec {
    /// A spec with the given runner token and script, every other field at its default.
    pub fn new(runner_token: impl Into<String>, script: &[&str]) -> Self {
        JobSpec {
            runner_token: runner_token.into(),
            script: script.iter().map(|line| (*line).to_owned()).collect(),
            ..JobSpec::default()
        }
    }
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            runner_token: String::new(),
            name: "build".to_owned(),
            stage: "test".to_owned(),
            project_id: 1,
            project_path: "group/project".to_owned(),
            script: Vec::new(),
            after_script: Vec::new(),
            variables: Vec::new(),
            artifacts: Vec::new(),
            dependencies: Vec::new(),
            timeout: 3600,
            repo_url: None,
            required_features: Vec::new(),
            final_put_202: 0,
            git_ref: "main".to_owned(),
            sha: None,
            pipeline_id: None,
            image: None,
            services: Vec::new(),
            tags: Vec::new(),
            pipeline_source: "push".to_owned(),
        }
    }
}

/// A CI/CD variable, exactly as it appears in the job payload (runner-protocol.md §3.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobVariable {
    pub key: String,
    pub value: String,
    pub masked: bool,
    pub file: bool,
    pub public: bool,
    pub raw: bool,
}

impl JobVariable {
    /// A plain public variable.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        JobVariable {
            key: key.into(),
            value: value.into(),
            ..JobVariable::default()
        }
    }
}

impl Default for JobVariable {
    fn default() -> Self {
        JobVariable {
            key: String::new(),
            value: String::new(),
            masked: false,
            file: false,
            public: true,
            raw: false,
        }
    }
}

/// One `artifacts[]` entry of the job payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArtifactSpec {
    pub name: String,
    pub paths: Vec<String>,
    pub exclude: Vec<String>,
    pub untracked: bool,
    /// `on_success`, `on_failure` or `always`.
    pub when: String,
    pub artifact_type: String,
    pub artifact_format: String,
    pub expire_in: Option<String>,
}

impl Default for ArtifactSpec {
    fn default() -> Self {
        ArtifactSpec {
            name: "artifacts".to_owned(),
            paths: Vec::new(),
            exclude: Vec::new(),
            untracked: false,
            when: "on_success".to_owned(),
            artifact_type: "archive".to_owned(),
            artifact_format: "zip".to_owned(),
            expire_in: None,
        }
    }
}

/// `POST /control/jobs/batch`: `count` jobs from one spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobBatch {
    pub spec: JobSpec,
    pub count: u32,
}

/// `POST /control/pipelines`: a pipeline's jobs, stage by stage (each spec's `stage` names
/// its stage; `pipeline_id` is given by the fake).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPipeline {
    pub stages: Vec<Vec<JobSpec>>,
}

/// The answer to `POST /control/pipelines`: the pipeline's id and its jobs, stage by stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedPipeline {
    pub id: u64,
    pub stages: Vec<Vec<super::EnqueuedJob>>,
}

/// What a test asks the fake to keep as a pipeline schedule (`POST /control/pipeline_schedules`),
/// listed by `GET /api/v4/projects/:id/pipeline_schedules`. The fake never runs it: a test
/// creates the schedule's pipeline itself (`pipeline_source: "schedule"`) when it wants it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleSpec {
    pub project_id: u64,
    pub project_path: String,
    pub description: String,
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub cron: String,
    pub cron_timezone: String,
    /// GitLab's `next_run_at`, ISO 8601 as GitLab writes it (`2026-11-28T02:03:00.000Z`).
    pub next_run_at: String,
    pub active: bool,
}

impl Default for ScheduleSpec {
    fn default() -> Self {
        ScheduleSpec {
            project_id: 1,
            project_path: "group/project".to_owned(),
            description: "Nightly".to_owned(),
            git_ref: "refs/heads/main".to_owned(),
            cron: "0 2 * * *".to_owned(),
            cron_timezone: "UTC".to_owned(),
            next_run_at: String::new(),
            active: true,
        }
    }
}

/// Answer to `POST /control/pipeline_schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedSchedule {
    pub id: u64,
}
