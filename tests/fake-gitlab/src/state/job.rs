//! One job and its transitions (README "GitLab semantics"). Pure: no IO, `now` is an argument.
//! The runner's `PUT` and trace `PATCH` on a job live in `update` and `trace`.

mod trace;
mod update;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::control::{ArtifactView, JobSpec, JobStatus, JobView};

pub(crate) use trace::TraceReply;
pub(crate) use update::{FAILURE_REASONS, JobUpdate, UpdateReply};

/// An artifact file on disk and what GitLab knows about it.
#[derive(Debug, Clone)]
pub(crate) struct StoredArtifact {
    pub artifact_type: String,
    pub artifact_format: String,
    pub filename: String,
    pub size: u64,
    pub expire_in: Option<String>,
    pub path: PathBuf,
    pub sha256: [u8; 32],
    /// Unguessable name under `/storage/` for `--artifacts-redirect`.
    pub storage_key: String,
}

#[derive(Debug)]
pub(crate) struct Job {
    pub id: u64,
    pub token: String,
    pub spec: JobSpec,
    pub pipeline_id: u64,
    pub sha: String,
    pub status: JobStatus,
    /// When the job (last) entered the queue, for `time_in_queue_seconds`.
    pub queued_at: Instant,
    pub failure_reason: Option<String>,
    pub exit_code: Option<i64>,
    pub trace: Vec<u8>,
    trace_crc: crc32fast::Hasher,
    pub reported_checksum: Option<String>,
    pub reported_bytesize: Option<u64>,
    pub artifacts: BTreeMap<String, StoredArtifact>,
    pub final_put_attempts: u32,
    pub system_id: Option<String>,
    pub runner_features: Option<BTreeMap<String, bool>>,
    /// While `waiting_for_ack`: when the acknowledgement key expires (GitLab's Redis key
    /// `runner:build_ack_queue:<id>`), unless a `pending` keep-alive renews it.
    pub ack_deadline: Option<Instant>,
    pub handouts: u32,
    /// When the job became `running` (GitLab's `ci_running_builds.created_at`).
    pub running_since: Option<Instant>,
    pub retry_of: Option<u64>,
    pub retried_as: Option<u64>,
    /// How many auto-retries came before this job in its chain.
    pub retry_count: u32,
}

impl Job {
    pub fn new(
        id: u64,
        token: String,
        spec: JobSpec,
        pipeline_id: u64,
        sha: String,
        now: Instant,
    ) -> Self {
        Job {
            id,
            token,
            spec,
            pipeline_id,
            sha,
            status: JobStatus::Pending,
            queued_at: now,
            failure_reason: None,
            exit_code: None,
            trace: Vec::new(),
            trace_crc: crc32fast::Hasher::new(),
            reported_checksum: None,
            reported_bytesize: None,
            artifacts: BTreeMap::new(),
            final_put_attempts: 0,
            system_id: None,
            runner_features: None,
            ack_deadline: None,
            handouts: 0,
            running_since: None,
            retry_of: None,
            retried_as: None,
            retry_count: 0,
        }
    }

    /// The first `required_features` entry the runner does not advertise as `true`.
    pub fn missing_feature(&self, features: &BTreeMap<String, bool>) -> Option<&str> {
        self.spec
            .required_features
            .iter()
            .find(|name| !features.get(name.as_str()).copied().unwrap_or(false))
            .map(String::as_str)
    }

    fn has_feature(&self, name: &str) -> bool {
        self.runner_features
            .as_ref()
            .and_then(|features| features.get(name).copied())
            .unwrap_or(false)
    }

    /// Records who took the job. With an `ack_window` (two-phase commit: the feature flag is on,
    /// the runner advertises `two_phase_job_commit` and names its manager by `system_id`) the job
    /// stays pending until the acceptance `PUT`, else it runs at once (runner-protocol.md §3.5).
    pub fn hand_out(
        &mut self,
        system_id: Option<String>,
        features: BTreeMap<String, bool>,
        now: Instant,
        ack_window: Option<Duration>,
    ) {
        self.system_id = system_id;
        self.runner_features = Some(features);
        self.handouts += 1;
        match ack_window {
            Some(window) => {
                self.status = JobStatus::WaitingForAck;
                self.ack_deadline = Some(now + window);
            }
            None => self.start_running(now),
        }
    }

    fn start_running(&mut self, now: Instant) {
        self.status = JobStatus::Running;
        self.ack_deadline = None;
        self.running_since = Some(now);
    }

    /// Whether the acknowledgement key still lives (GitLab's `runner_ack_wait_status ==
    /// :waiting`). Once it has expired the job is plain `pending` to every job-token call.
    pub fn waiting_for_ack(&self, now: Instant) -> bool {
        self.status == JobStatus::WaitingForAck && self.ack_deadline.is_some_and(|d| d > now)
    }

    /// `Ci::RetryWaitingJobService`: the key expired, so the job fails with
    /// `runner_provisioning_timeout` (never handed out again under this id).
    pub fn fail_unacknowledged(&mut self) {
        self.status = JobStatus::Failed;
        self.failure_reason = Some("runner_provisioning_timeout".to_owned());
        self.ack_deadline = None;
    }

    pub fn is_timed_out(&self, now: Instant, margin: Duration) -> bool {
        let Some(since) = self.running_since else {
            return false;
        };
        let limit = since + Duration::from_secs(self.spec.timeout) + margin;
        matches!(self.status, JobStatus::Running | JobStatus::Canceling) && now >= limit
    }

    /// `Ci::TimedOutBuilds::DropRunningService`: a job still running `margin` after its own
    /// timeout is failed with `server_timeout_running`.
    pub fn drop_if_timed_out(&mut self, now: Instant, margin: Duration) -> bool {
        if !self.is_timed_out(now, margin) {
            return false;
        }
        self.status = JobStatus::Failed;
        self.failure_reason = Some("server_timeout_running".to_owned());
        true
    }

    /// Drops a job the runner cannot run (Rails' pre-assign checks).
    pub fn drop_unsupported(
        &mut self,
        system_id: Option<String>,
        features: BTreeMap<String, bool>,
    ) {
        self.system_id = system_id;
        self.runner_features = Some(features);
        self.status = JobStatus::Failed;
        self.failure_reason = Some("runner_unsupported".to_owned());
    }

    /// Cancels from the UI: graceful (`canceling`) only for a running job whose runner
    /// advertised `cancel_gracefully` (runner-protocol.md §6); a second cancel, or `force` (GitLab's
    /// "force cancel"), makes it `canceled` at once.
    pub fn cancel(&mut self, force: bool) -> JobStatus {
        self.status = match self.status {
            JobStatus::Running if !force && self.has_feature("cancel_gracefully") => {
                JobStatus::Canceling
            }
            JobStatus::Created
            | JobStatus::Pending
            | JobStatus::WaitingForAck
            | JobStatus::Running
            | JobStatus::Canceling => JobStatus::Canceled,
            finished => finished,
        };
        if self.status == JobStatus::Canceled {
            self.ack_deadline = None;
        }
        self.status
    }

    pub fn view(&self) -> JobView {
        JobView {
            id: self.id,
            name: self.spec.name.clone(),
            runner_token: self.spec.runner_token.clone(),
            status: self.status,
            failure_reason: self.failure_reason.clone(),
            exit_code: self.exit_code,
            trace_bytes: self.trace_len(),
            trace_crc32: self.trace_checksum(),
            reported_checksum: self.reported_checksum.clone(),
            reported_bytesize: self.reported_bytesize,
            artifacts: self
                .artifacts
                .values()
                .map(|artifact| ArtifactView {
                    artifact_type: artifact.artifact_type.clone(),
                    artifact_format: artifact.artifact_format.clone(),
                    filename: artifact.filename.clone(),
                    size: artifact.size,
                    expire_in: artifact.expire_in.clone(),
                })
                .collect(),
            final_put_attempts: self.final_put_attempts,
            system_id: self.system_id.clone(),
            runner_features: self.runner_features.clone(),
            handouts: self.handouts,
            retry_of: self.retry_of,
            retried_as: self.retried_as,
        }
    }
}

#[cfg(test)]
mod tests;
