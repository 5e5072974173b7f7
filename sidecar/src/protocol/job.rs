//! The job request (runner-protocol.md §3) and the job payload of its 201 answer (§3.4):
//! job info, git info, variables, steps, artifacts and dependencies.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::RunnerInfo;
use super::null_as_default;
use crate::secret::Secret;

#[derive(Debug, Serialize)]
pub struct JobRequest<'a> {
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
    pub system_id: &'a str,
    /// Omitted until a value was received (§3.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update: Option<&'a str>,
}

/// The job payload of a 201 answer (§3.4). `Debug` prints only id and name: the payload
/// carries tokens and variable values.
#[derive(Deserialize, Clone)]
pub struct JobResponse {
    pub id: i64,
    pub token: Secret,
    #[serde(default, deserialize_with = "null_as_default")]
    pub allow_git_fetch: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub job_info: JobInfo,
    #[serde(default, deserialize_with = "null_as_default")]
    pub git_info: GitInfo,
    #[serde(default, deserialize_with = "null_as_default")]
    pub runner_info: JobRunnerInfo,
    #[serde(default, deserialize_with = "null_as_default")]
    pub variables: Vec<Variable>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub steps: Vec<Step>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub artifacts: Vec<ArtifactSpec>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub dependencies: Vec<Dependency>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub features: JobFeatures,
    /// Native steps (a JSON string); the sidecar does not implement them (§3.5 step 4).
    #[serde(default, deserialize_with = "null_as_default")]
    pub run: Option<String>,
}

impl fmt::Debug for JobResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobResponse")
            .field("id", &self.id)
            .field("name", &self.job_info.name)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
pub struct JobInfo {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub stage: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub project_id: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub project_full_path: String,
}

#[derive(Deserialize, Clone, Default)]
pub struct GitInfo {
    #[serde(default, deserialize_with = "null_as_default")]
    pub repo_url: String,
    #[serde(default, rename = "ref", deserialize_with = "null_as_default")]
    pub git_ref: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub sha: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub before_sha: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub ref_type: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub refspecs: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub depth: i64,
}

impl fmt::Debug for GitInfo {
    // repo_url embeds the job token (§3.4).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitInfo")
            .field("ref", &self.git_ref)
            .field("sha", &self.sha)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
pub struct JobRunnerInfo {
    /// Seconds; ≤0 means the 7200 s default (§3.4, §10).
    #[serde(default, deserialize_with = "null_as_default")]
    pub timeout: i64,
}

#[derive(Deserialize, Clone, Default)]
pub struct Variable {
    pub key: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub value: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub public: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub file: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub masked: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub raw: bool,
}

impl fmt::Debug for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Variable")
            .field("key", &self.key)
            .field("file", &self.file)
            .field("masked", &self.masked)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

/// `when` of steps and artifacts.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum When {
    #[default]
    OnSuccess,
    OnFailure,
    Always,
}

impl When {
    /// Whether something with this `when` runs given the job's state so far.
    pub fn applies(self, job_failed: bool) -> bool {
        match self {
            When::OnSuccess => !job_failed,
            When::OnFailure => job_failed,
            When::Always => true,
        }
    }
}

#[derive(Deserialize, Clone, Default)]
pub struct Step {
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub script: Vec<String>,
    /// Seconds; 0 = no own timeout.
    #[serde(default, deserialize_with = "null_as_default")]
    pub timeout: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub when: When,
    #[serde(default, deserialize_with = "null_as_default")]
    pub allow_failure: bool,
}

impl fmt::Debug for Step {
    // Scripts are job payload: keep them out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Step")
            .field("name", &self.name)
            .field("commands", &self.script.len())
            .field("when", &self.when)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
pub struct ArtifactSpec {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub untracked: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub paths: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub exclude: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub when: When,
    #[serde(default, deserialize_with = "null_as_default")]
    pub artifact_type: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub artifact_format: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub expire_in: String,
}

#[derive(Deserialize, Clone)]
pub struct Dependency {
    pub id: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token: Secret,
    #[serde(default, deserialize_with = "null_as_default")]
    pub artifacts_file: Option<ArtifactsFile>,
}

impl fmt::Debug for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dependency")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("artifacts_file", &self.artifacts_file)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, Clone, Default)]
pub struct ArtifactsFile {
    #[serde(default, deserialize_with = "null_as_default")]
    pub filename: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub size: i64,
}

#[derive(Debug, Deserialize, Clone, Default)]
pub struct JobFeatures {
    #[serde(default, deserialize_with = "null_as_default")]
    pub trace_sections: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token_mask_prefixes: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub failure_reasons: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_payload_parses_with_unknown_fields_and_nulls() {
        let raw = serde_json::json!({
            "id": 7, "token": "glcbt-abc", "allow_git_fetch": true,
            "job_info": {"name": "build", "stage": "test", "project_id": 1,
                         "project_full_path": "g/p", "project_jobs_running_on_instance_runners_count": "0"},
            "git_info": {"repo_url": "http://x", "ref": "main", "sha": "abc", "refspecs": null, "depth": 20},
            "runner_info": {"timeout": 3600, "runner_session_url": null},
            "variables": [{"key": "A", "value": "b", "public": true, "file": false, "masked": false}],
            "steps": [{"name": "script", "script": ["echo hi"], "timeout": 3600, "when": "on_success", "allow_failure": false}],
            "artifacts": [{"name": null, "paths": ["a"], "expire_in": null, "when": null}],
            "dependencies": [{"id": 3, "name": "dep", "token": "x", "artifacts_file": null}],
            "image": null, "services": [],
            "features": {"trace_sections": true, "token_mask_prefixes": ["glpat-"], "failure_reasons": ["script_failure"]},
            "something_new": {"x": 1}
        });
        let job: JobResponse = serde_json::from_value(raw).unwrap();
        assert_eq!(job.id, 7);
        assert_eq!(job.git_info.depth, 20);
        assert!(job.git_info.refspecs.is_empty());
        assert_eq!(job.artifacts[0].expire_in, "");
        assert_eq!(job.artifacts[0].when, When::OnSuccess);
        assert!(job.dependencies[0].artifacts_file.is_none());
        assert_eq!(job.steps[0].when, When::OnSuccess);
        let dbg = format!("{job:?}");
        assert!(!dbg.contains("glcbt-abc"), "{dbg}");
    }
}
