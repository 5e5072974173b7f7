//! The runner's `PUT /jobs/:id` on a job: acceptance and keep-alives of a two-phase job, and the
//! final update with its `202` loop and GitLab's failure reasons (runner-protocol.md §3.5, §4).

use std::time::{Duration, Instant};

use crate::control::JobStatus;

use super::Job;

/// GitLab's `failure_reason` enum (CE, runner-protocol.md §9). Sent as `features.failure_reasons`, and
/// a reported reason outside it is stored as `unknown_failure`, as Rails does.
pub(crate) const FAILURE_REASONS: &[&str] = &[
    "unknown_failure",
    "script_failure",
    "api_failure",
    "stuck_or_timeout_failure",
    "runner_system_failure",
    "missing_dependency_failure",
    "runner_unsupported",
    "stale_schedule",
    "job_execution_timeout",
    "archived_failure",
    "unmet_prerequisites",
    "scheduler_failure",
    "data_integrity_failure",
    "forward_deployment_failure",
    "user_blocked",
    "project_deleted",
    "ci_quota_exceeded",
    "pipeline_loop_detected",
    "no_matching_runner",
    "trace_size_exceeded",
    "builds_disabled",
    "environment_creation_failure",
    "deployment_rejected",
    "failed_outdated_deployment_job",
    "job_execution_server_timeout",
    "stuck_pending_with_matching_runners",
    "stuck_pending_no_matching_runners",
    "no_updates_running",
    "no_updates_canceling",
    "server_timeout_running",
    "server_timeout_canceling",
    "runner_configuration_error",
    "runner_external_dependency_failure",
    "runner_interrupted",
];

/// Rails' final-update backoff caps at 64 s (runner-protocol.md §4, `backoff.rb`).
const MAX_FINAL_BACKOFF_SECS: u64 = 64;

/// The body of `PUT /jobs/:id` that matters to GitLab (runner-protocol.md §4).
#[derive(Debug, Clone, Default)]
pub(crate) struct JobUpdate {
    pub state: String,
    pub failure_reason: Option<String>,
    pub exit_code: Option<i64>,
    pub checksum: Option<String>,
    pub bytesize: Option<u64>,
}

/// How GitLab answers a `PUT /jobs/:id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateReply {
    NotFound,
    /// Token does not belong to the job.
    Forbidden,
    /// `403` with `Job-Status`: the job is not running (any more).
    NotProcessing(JobStatus),
    /// `400`: a state that makes no sense now.
    Invalid(JobStatus),
    /// `200`.
    Updated(JobStatus),
    /// `202`: final state accepted, come back in `backoff_secs`.
    Accepted {
        status: JobStatus,
        backoff_secs: u64,
    },
}

impl Job {
    /// `PUT /jobs/:id` once the token is checked (README table; runner-protocol.md §3.5, §4).
    pub fn update(
        &mut self,
        update: &JobUpdate,
        now: Instant,
        ack_window: Duration,
    ) -> UpdateReply {
        match self.status {
            // The key expired: job-token authentication refuses the job as not processing,
            // `Job-Status: pending`, until the retry worker fails it.
            JobStatus::WaitingForAck if !self.waiting_for_ack(now) => {
                UpdateReply::NotProcessing(self.status)
            }
            JobStatus::WaitingForAck => match update.state.as_str() {
                "running" => {
                    self.start_running(now);
                    UpdateReply::Updated(self.status)
                }
                "pending" => {
                    self.ack_deadline = Some(now + ack_window);
                    UpdateReply::Updated(self.status)
                }
                _ => UpdateReply::Invalid(self.status),
            },
            JobStatus::Running | JobStatus::Canceling => match update.state.as_str() {
                "running" => UpdateReply::Updated(self.status),
                "success" | "failed" => self.final_update(update),
                _ => UpdateReply::Invalid(self.status),
            },
            other => UpdateReply::NotProcessing(other),
        }
    }

    fn final_update(&mut self, update: &JobUpdate) -> UpdateReply {
        self.final_put_attempts += 1;
        self.exit_code = update.exit_code;
        self.reported_checksum.clone_from(&update.checksum);
        self.reported_bytesize = update.bytesize;
        if self.final_put_attempts <= self.spec.final_put_202 {
            let backoff_secs = 1u64
                .checked_shl(self.final_put_attempts - 1)
                .unwrap_or(u64::MAX)
                .min(MAX_FINAL_BACKOFF_SECS);
            return UpdateReply::Accepted {
                status: self.status,
                backoff_secs,
            };
        }
        // A canceling job ends canceled whatever the runner reports (runner-protocol.md §4).
        self.status = if self.status == JobStatus::Canceling {
            JobStatus::Canceled
        } else if update.state == "success" {
            JobStatus::Success
        } else {
            JobStatus::Failed
        };
        self.failure_reason = (self.status == JobStatus::Failed)
            .then(|| normalize_failure_reason(update.failure_reason.as_deref()));
        UpdateReply::Updated(self.status)
    }
}

/// Rails stores an unknown (or missing) reason as `unknown_failure`.
fn normalize_failure_reason(reason: Option<&str>) -> String {
    match reason {
        Some(reason) if FAILURE_REASONS.contains(&reason) => reason.to_owned(),
        _ => "unknown_failure".to_owned(),
    }
}
