//! Request and response bodies of the runner API (runner-protocol.md §2–§4) and the job payload
//! (§3.4). Only the payload fields the sidecar uses are modelled; unknown fields are ignored,
//! like the runner's Go structs do.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// The 31 feature keys of `info.features` (§3.1). All are always serialized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub variables: bool,
    pub image: bool,
    pub services: bool,
    pub artifacts: bool,
    pub cache: bool,
    pub fallback_cache_keys: bool,
    pub shared: bool,
    pub upload_multiple_artifacts: bool,
    pub upload_raw_artifacts: bool,
    pub session: bool,
    pub terminal: bool,
    pub refspecs: bool,
    pub masking: bool,
    pub proxy: bool,
    pub raw_variables: bool,
    pub artifacts_exclude: bool,
    pub multi_build_steps: bool,
    pub trace_reset: bool,
    pub trace_checksum: bool,
    pub trace_size: bool,
    pub vault_secrets: bool,
    pub cancelable: bool,
    pub return_exit_code: bool,
    pub service_variables: bool,
    pub service_multiple_aliases: bool,
    pub image_executor_opts: bool,
    pub service_executor_opts: bool,
    pub cancel_gracefully: bool,
    pub native_steps_integration: bool,
    pub two_phase_job_commit: bool,
    pub job_inputs: bool,
}

impl Features {
    /// What the sidecar really implements. GitLab uses these to decide job compatibility,
    /// graceful cancellation and two-phase commit (§3.1), so nothing is advertised that the
    /// code does not do: no image/services/cache/session/terminal/secrets/steps/inputs.
    pub fn sidecar() -> Self {
        Self {
            variables: true,
            artifacts: true,
            shared: true,
            upload_multiple_artifacts: true,
            upload_raw_artifacts: true,
            refspecs: true,
            masking: true,
            raw_variables: true,
            artifacts_exclude: true,
            multi_build_steps: true,
            trace_reset: true,
            trace_checksum: true,
            trace_size: true,
            cancelable: true,
            return_exit_code: true,
            cancel_gracefully: true,
            two_phase_job_commit: true,
            ..Self::default()
        }
    }
}

/// `info.config` (§3.1): the runner always sends the `gpus` key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigInfo {
    pub gpus: String,
}

/// The runner info object sent with register/verify/job request/update (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerInfo {
    pub name: String,
    pub version: String,
    pub revision: String,
    pub platform: String,
    pub architecture: String,
    pub executor: String,
    pub shell: String,
    pub features: Features,
    pub config: ConfigInfo,
}

impl RunnerInfo {
    /// Info for job requests and updates: shell executor, bash.
    pub fn sidecar() -> Self {
        Self {
            name: crate::NAME.to_owned(),
            version: crate::VERSION.to_owned(),
            revision: crate::REVISION.to_owned(),
            platform: std::env::consts::OS.to_owned(),
            architecture: go_arch(std::env::consts::ARCH).to_owned(),
            executor: "shell".to_owned(),
            shell: "bash".to_owned(),
            features: Features::sidecar(),
            config: ConfigInfo::default(),
        }
    }

    /// Info for `POST /runners` (§2): built from an empty config, so executor and shell
    /// are empty.
    pub fn for_registration() -> Self {
        Self {
            executor: String::new(),
            shell: String::new(),
            ..Self::sidecar()
        }
    }
}

/// Rust's `std::env::consts::ARCH` spelled the way Go's GOARCH spells it, which is what
/// GitLab expects in `info.architecture` and the User-Agent (§1, §3.1).
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

// ---------------------------------------------------------------------------------------
// Register / verify / unregister (§2)

#[derive(Debug, Serialize)]
pub struct RegisterRequest<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    pub run_untagged: bool,
    pub locked: bool,
    pub paused: bool,
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
}

#[derive(Debug, Serialize)]
pub struct VerifyRequest<'a> {
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
    pub system_id: &'a str,
}

#[derive(Debug, Serialize)]
pub struct UnregisterRequest<'a> {
    pub token: &'a Secret,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_id: Option<&'a str>,
}

/// Answer of register and verify: `{id, token, token_expires_at}`.
#[derive(Deserialize, Clone)]
pub struct RunnerCredentials {
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: i64,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token: Secret,
    #[serde(default, deserialize_with = "null_as_default")]
    pub token_expires_at: Option<String>,
}

impl fmt::Debug for RunnerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerCredentials")
            .field("id", &self.id)
            .field("token_expires_at", &self.token_expires_at)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------
// Job request (§3)

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

/// Go's `encoding/json` leaves a field untouched on `null`; GitLab sends `null` for many
/// optional values (`expire_in`, `artifacts`, …), so `null` means "default" here too
/// instead of making the whole payload undecodable.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
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

// ---------------------------------------------------------------------------------------
// Job update (§4)

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Success,
    Failed,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytesize: Option<u64>,
}

impl JobOutput {
    /// `output` of a trace of `bytesize` bytes with CRC32 `crc` (§4, §5): Go's omitempty
    /// drops a zero size.
    pub fn of(crc: u32, bytesize: u64) -> Self {
        Self {
            checksum: Some(crate::trace::format_checksum(crc)),
            bytesize: (bytesize > 0).then_some(bytesize),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct UpdateJobRequest<'a> {
    pub info: &'a RunnerInfo,
    pub token: &'a Secret,
    pub state: JobState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<&'a str>,
    /// Deprecated top-level copy of `output.checksum`, still sent by the runner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<&'a str>,
    pub output: &'a JobOutput,
    /// omitempty in the runner: 0 is never sent (§4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

// ---------------------------------------------------------------------------------------
// Failure reasons (§9)

/// Runner-side failure reasons (§9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    ScriptFailure,
    RunnerSystemFailure,
    JobExecutionTimeout,
    ImagePullFailure,
    UnknownFailure,
    RunnerConfigurationError,
    RunnerExternalDependencyFailure,
    RunnerInterrupted,
    /// Runner-internal; mapped before sending.
    JobCanceled,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::ScriptFailure => "script_failure",
            FailureReason::RunnerSystemFailure => "runner_system_failure",
            FailureReason::JobExecutionTimeout => "job_execution_timeout",
            FailureReason::ImagePullFailure => "image_pull_failure",
            FailureReason::UnknownFailure => "unknown_failure",
            FailureReason::RunnerConfigurationError => "runner_configuration_error",
            FailureReason::RunnerExternalDependencyFailure => "runner_external_dependency_failure",
            FailureReason::RunnerInterrupted => "runner_interrupted",
            FailureReason::JobCanceled => "job_canceled",
        }
    }

    /// The value to send given the job's `features.failure_reasons` (§9): always-supported
    /// reasons and reasons the job lists go as-is, then the compatibility map, else
    /// `unknown_failure`.
    pub fn map_for(self, supported: &[String]) -> &'static str {
        use FailureReason::*;
        let always = matches!(
            self,
            ScriptFailure | RunnerSystemFailure | JobExecutionTimeout
        );
        if always || supported.iter().any(|s| s == self.as_str()) {
            return self.as_str();
        }
        match self {
            ImagePullFailure | RunnerExternalDependencyFailure => RunnerSystemFailure.as_str(),
            RunnerConfigurationError => ScriptFailure.as_str(),
            _ => UnknownFailure.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_serialize_all_31_keys() {
        let v = serde_json::to_value(Features::sidecar()).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 31);
        assert_eq!(obj["cancel_gracefully"], true);
        assert_eq!(obj["two_phase_job_commit"], true);
        assert_eq!(obj["image"], false);
        assert_eq!(obj["job_inputs"], false);
        assert_eq!(obj["cache"], false);
    }

    #[test]
    fn runner_info_shape() {
        let v = serde_json::to_value(RunnerInfo::sidecar()).unwrap();
        assert_eq!(v["name"], "sidecar");
        assert_eq!(v["executor"], "shell");
        assert_eq!(v["shell"], "bash");
        assert_eq!(v["config"]["gpus"], "");
        assert_eq!(v["platform"], std::env::consts::OS);
        let reg = serde_json::to_value(RunnerInfo::for_registration()).unwrap();
        assert_eq!(reg["executor"], "");
    }

    #[test]
    fn go_arch_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    #[test]
    fn failure_reason_mapping() {
        let none: Vec<String> = vec![];
        assert_eq!(
            FailureReason::ScriptFailure.map_for(&none),
            "script_failure"
        );
        assert_eq!(
            FailureReason::JobExecutionTimeout.map_for(&none),
            "job_execution_timeout"
        );
        assert_eq!(FailureReason::JobCanceled.map_for(&none), "unknown_failure");
        assert_eq!(
            FailureReason::ImagePullFailure.map_for(&none),
            "runner_system_failure"
        );
        assert_eq!(
            FailureReason::RunnerConfigurationError.map_for(&none),
            "script_failure"
        );
        assert_eq!(
            FailureReason::RunnerExternalDependencyFailure.map_for(&none),
            "runner_system_failure"
        );
        assert_eq!(
            FailureReason::RunnerInterrupted.map_for(&none),
            "unknown_failure"
        );
        let supported = vec![
            "runner_interrupted".to_owned(),
            "image_pull_failure".to_owned(),
        ];
        assert_eq!(
            FailureReason::RunnerInterrupted.map_for(&supported),
            "runner_interrupted"
        );
        assert_eq!(
            FailureReason::ImagePullFailure.map_for(&supported),
            "image_pull_failure"
        );
    }

    #[test]
    fn update_body_omits_zero_exit_code_and_empty_output() {
        let info = RunnerInfo::sidecar();
        let output = JobOutput::default();
        let token = Secret::new("t");
        let body = UpdateJobRequest {
            info: &info,
            token: &token,
            state: JobState::Running,
            failure_reason: None,
            checksum: None,
            output: &output,
            exit_code: None,
        };
        let v = serde_json::to_value(&body).unwrap();
        assert_eq!(v["state"], "running");
        assert_eq!(v["output"], serde_json::json!({}));
        assert!(v.get("exit_code").is_none());
        assert!(v.get("failure_reason").is_none());
        assert_eq!(v["token"], "t");
        assert!(!format!("{body:?}").contains("\"t\""));
        let out = JobOutput::of(0xdeadbeef, 12);
        assert_eq!(out.checksum.as_deref(), Some("crc32:deadbeef"));
        assert_eq!(out.bytesize, Some(12));
        assert_eq!(JobOutput::of(0, 0).bytesize, None);
    }

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
