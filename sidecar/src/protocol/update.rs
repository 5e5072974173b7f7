//! The job update (`PUT /jobs/:id`, runner-protocol.md §4) and the runner-side failure
//! reasons it reports, mapped to what the job's GitLab understands (§9).

use serde::Serialize;

use super::RunnerInfo;
use crate::secret::Secret;

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
}
