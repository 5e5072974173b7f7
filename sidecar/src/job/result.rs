//! How a job's build ended ([`BuildResult`]), and how that maps to the state, failure reason
//! and exit code of the final update (runner-protocol.md §4, §9) and to the last line of the log.

use super::updater::{FinalResult, FinalState};
use crate::protocol::{FailureReason, JobState};
use crate::trace::Trace;

/// Outcome of the build, before it is mapped to the final PUT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildResult {
    Success,
    Failed {
        reason: FailureReason,
        exit_code: Option<i32>,
        message: String,
    },
    /// Graceful cancel (`canceling`): reported as failed/job_canceled (§6).
    Canceled,
    /// Abort from GitLab, or forced runner shutdown (`by_runner`).
    Aborted {
        by_runner: bool,
    },
}

impl BuildResult {
    pub(super) fn system(message: impl Into<String>) -> Self {
        BuildResult::Failed {
            reason: FailureReason::RunnerSystemFailure,
            exit_code: None,
            message: message.into(),
        }
    }

    pub(super) fn script(exit_code: i32) -> Self {
        BuildResult::Failed {
            reason: FailureReason::ScriptFailure,
            exit_code: Some(exit_code),
            message: format!("exit code {exit_code}"),
        }
    }

    /// For `when:` decisions: anything but success counts as failed.
    pub fn is_failure(&self) -> bool {
        !matches!(self, BuildResult::Success)
    }

    /// State, mapped failure reason and exit code of the final PUT (§4, §9).
    pub fn final_state(&self, supported_reasons: &[String]) -> FinalState {
        let failed = |reason: FailureReason, exit_code| FinalState {
            state: JobState::Failed,
            failure_reason: Some(reason.map_for(supported_reasons).to_owned()),
            exit_code,
        };
        match self {
            BuildResult::Success => FinalState {
                state: JobState::Success,
                failure_reason: None,
                exit_code: None,
            },
            BuildResult::Failed {
                reason, exit_code, ..
            } => failed(*reason, *exit_code),
            BuildResult::Canceled | BuildResult::Aborted { by_runner: false } => {
                failed(FailureReason::JobCanceled, None)
            }
            BuildResult::Aborted { by_runner: true } => {
                failed(FailureReason::RunnerSystemFailure, None)
            }
        }
    }

    /// The last line of the log.
    pub(super) fn write_final_line(&self, trace: &Trace) {
        match self {
            BuildResult::Success => trace.success("Job succeeded"),
            BuildResult::Failed {
                reason: FailureReason::RunnerSystemFailure,
                message,
                ..
            } => trace.error(&format!("Job failed (system failure): {message}")),
            BuildResult::Failed { message, .. } => trace.error(&format!("Job failed: {message}")),
            BuildResult::Canceled => trace.error("Job failed: canceled"),
            BuildResult::Aborted { by_runner: false } => trace.error("Job failed: aborted"),
            BuildResult::Aborted { by_runner: true } => {
                trace.error("Job failed (system failure): runner was stopped")
            }
        }
    }
}

/// What happened to a job, for the runner loop and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    pub id: i64,
    /// `None` when the acceptance PUT told us to drop the job (§3.5).
    pub result: Option<BuildResult>,
    pub final_result: Option<FinalResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states() {
        let none: Vec<String> = vec![];
        let s = BuildResult::Success.final_state(&none);
        assert_eq!(
            (s.state, s.failure_reason, s.exit_code),
            (JobState::Success, None, None)
        );
        let s = BuildResult::script(3).final_state(&none);
        assert_eq!(s.state, JobState::Failed);
        assert_eq!(s.failure_reason.as_deref(), Some("script_failure"));
        assert_eq!(s.exit_code, Some(3));
        let s = BuildResult::Canceled.final_state(&none);
        assert_eq!(s.failure_reason.as_deref(), Some("unknown_failure"));
        let with = vec!["job_canceled".to_owned()];
        let s = BuildResult::Canceled.final_state(&with);
        assert_eq!(s.failure_reason.as_deref(), Some("job_canceled"));
        let s = BuildResult::Aborted { by_runner: true }.final_state(&none);
        assert_eq!(s.failure_reason.as_deref(), Some("runner_system_failure"));
    }
}
