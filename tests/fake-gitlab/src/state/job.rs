//! One job and its transitions (README "GitLab semantics"). Pure: no IO, `now` is an argument.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::control::{ArtifactView, JobSpec, JobStatus, JobView};

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

/// How GitLab answers a `PATCH /jobs/:id/trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TraceReply {
    NotFound,
    Forbidden,
    NotProcessing(JobStatus),
    /// `400`: no usable `Content-Range`.
    MissingRange,
    /// `202` with the new length.
    Appended {
        length: u64,
        status: JobStatus,
    },
    /// `416` with the stored length.
    RangeMismatch {
        length: u64,
        status: JobStatus,
    },
    /// `403`: the trace would outgrow the limit; the job is now failed.
    SizeExceeded,
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

    /// `PATCH /jobs/:id/trace` once the token is checked (runner-protocol.md §5). `body` is `None`
    /// when it was too large to even read (larger than `limit`).
    pub fn append_trace(
        &mut self,
        start: Option<u64>,
        body: Option<&[u8]>,
        limit: u64,
    ) -> TraceReply {
        if !matches!(self.status, JobStatus::Running | JobStatus::Canceling) {
            return TraceReply::NotProcessing(self.status);
        }
        let Some(start) = start else {
            return TraceReply::MissingRange;
        };
        let length = self.trace_len();
        if start != length {
            // Rails appends nothing, then compares the stored length with start + body size:
            // equal (a repeat of the trace's tail, or an empty patch) is still `202`.
            let size = body.map_or(u64::MAX, |b| b.len() as u64);
            if start.saturating_add(size) == length {
                return TraceReply::Appended {
                    length,
                    status: self.status,
                };
            }
            return TraceReply::RangeMismatch {
                length,
                status: self.status,
            };
        }
        let new_length = body.map_or(u64::MAX, |body| length.saturating_add(body.len() as u64));
        let Some(body) = body.filter(|_| new_length <= limit) else {
            self.status = JobStatus::Failed;
            self.failure_reason = Some("trace_size_exceeded".to_owned());
            return TraceReply::SizeExceeded;
        };
        self.trace.extend_from_slice(body);
        self.trace_crc.update(body);
        TraceReply::Appended {
            length: new_length,
            status: self.status,
        }
    }

    /// Cancels from the UI: graceful (`canceling`) only for a running job whose runner
    /// advertised `cancel_gracefully` (runner-protocol.md §6); a second cancel, or `force` (GitLab's
    /// "force cancel"), makes it `canceled` at once.
    pub fn cancel(&mut self, force: bool) -> JobStatus {
        self.status = match self.status {
            JobStatus::Running if !force && self.has_feature("cancel_gracefully") => {
                JobStatus::Canceling
            }
            JobStatus::Pending
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

    pub fn trace_len(&self) -> u64 {
        self.trace.len() as u64
    }

    pub fn trace_checksum(&self) -> String {
        format!("crc32:{:08x}", self.trace_crc.clone().finalize())
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

/// Rails stores an unknown (or missing) reason as `unknown_failure`.
fn normalize_failure_reason(reason: Option<&str>) -> String {
    match reason {
        Some(reason) if FAILURE_REASONS.contains(&reason) => reason.to_owned(),
        _ => "unknown_failure".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(names: &[&str]) -> BTreeMap<String, bool> {
        names.iter().map(|n| ((*n).to_owned(), true)).collect()
    }

    fn running_job(spec: JobSpec, runner_features: &[&str]) -> Job {
        let now = Instant::now();
        let mut job = Job::new(1, "glcbt-x".into(), spec, 1, "0".repeat(40), now);
        job.hand_out(None, features(runner_features), now, None);
        job
    }

    fn final_put(state: &str, reason: Option<&str>) -> JobUpdate {
        JobUpdate {
            state: state.into(),
            failure_reason: reason.map(str::to_owned),
            exit_code: Some(1),
            ..JobUpdate::default()
        }
    }

    #[test]
    fn final_put_202_backoff_doubles_then_200() {
        let spec = JobSpec {
            final_put_202: 3,
            ..JobSpec::new("glrt-a", &["true"])
        };
        let mut job = running_job(spec, &[]);
        let now = Instant::now();
        let window = Duration::from_secs(1);
        let replies: Vec<_> = (0..4)
            .map(|_| job.update(&final_put("success", None), now, window))
            .collect();
        assert_eq!(
            replies,
            vec![
                UpdateReply::Accepted {
                    status: JobStatus::Running,
                    backoff_secs: 1
                },
                UpdateReply::Accepted {
                    status: JobStatus::Running,
                    backoff_secs: 2
                },
                UpdateReply::Accepted {
                    status: JobStatus::Running,
                    backoff_secs: 4
                },
                UpdateReply::Updated(JobStatus::Success),
            ]
        );
        assert_eq!(job.final_put_attempts, 4);
        assert_eq!(
            job.update(&final_put("success", None), now, window),
            UpdateReply::NotProcessing(JobStatus::Success)
        );
    }

    #[test]
    fn unknown_failure_reason_is_stored_as_unknown_failure() {
        let mut job = running_job(JobSpec::new("glrt-a", &["false"]), &[]);
        let reply = job.update(
            &final_put("failed", Some("job_canceled")),
            Instant::now(),
            Duration::from_secs(1),
        );
        assert_eq!(reply, UpdateReply::Updated(JobStatus::Failed));
        assert_eq!(job.failure_reason.as_deref(), Some("unknown_failure"));
        assert_eq!(job.exit_code, Some(1));
    }

    #[test]
    fn canceling_ends_canceled_whatever_is_reported() {
        let mut job = running_job(JobSpec::new("glrt-a", &["true"]), &["cancel_gracefully"]);
        assert_eq!(job.cancel(false), JobStatus::Canceling);
        let now = Instant::now();
        assert_eq!(
            job.update(&final_put("running", None), now, Duration::from_secs(1)),
            UpdateReply::Updated(JobStatus::Canceling)
        );
        assert_eq!(
            job.update(&final_put("success", None), now, Duration::from_secs(1)),
            UpdateReply::Updated(JobStatus::Canceled)
        );
        assert_eq!(job.failure_reason, None);
    }

    #[test]
    fn cancel_without_graceful_support_is_immediate() {
        let mut job = running_job(JobSpec::new("glrt-a", &["true"]), &[]);
        assert_eq!(job.cancel(false), JobStatus::Canceled);
        let mut pending = Job::new(
            2,
            "t".into(),
            JobSpec::default(),
            1,
            String::new(),
            Instant::now(),
        );
        assert_eq!(pending.cancel(false), JobStatus::Canceled);
    }

    #[test]
    fn two_phase_ack_states() {
        let now = Instant::now();
        let window = Duration::from_secs(120);
        let mut job = Job::new(1, "t".into(), JobSpec::default(), 1, String::new(), now);
        job.hand_out(
            Some("s_1".into()),
            features(&["two_phase_job_commit"]),
            now,
            Some(window),
        );
        assert_eq!(job.status, JobStatus::WaitingForAck);
        assert_eq!(job.ack_deadline, Some(now + window));

        let later = now + Duration::from_secs(60);
        assert_eq!(
            job.update(&final_put("pending", None), later, window),
            UpdateReply::Updated(JobStatus::WaitingForAck)
        );
        assert_eq!(
            job.ack_deadline,
            Some(later + window),
            "keep-alive extends the window"
        );
        assert_eq!(
            job.update(&final_put("success", None), later, window),
            UpdateReply::Invalid(JobStatus::WaitingForAck)
        );
        assert_eq!(
            job.update(&final_put("running", None), later, window),
            UpdateReply::Updated(JobStatus::Running)
        );
        assert_eq!(job.ack_deadline, None);
        assert_eq!(
            job.update(&final_put("pending", None), later, window),
            UpdateReply::Invalid(JobStatus::Running),
            "a keep-alive for a job that is not waiting is refused with 400"
        );
    }

    #[test]
    fn acceptance_after_the_key_expired_is_refused_as_pending() {
        let now = Instant::now();
        let window = Duration::from_secs(120);
        let mut job = Job::new(1, "t".into(), JobSpec::default(), 1, String::new(), now);
        job.hand_out(Some("s_1".into()), features(&[]), now, Some(window));
        let late = now + window;
        assert_eq!(
            job.update(&final_put("running", None), late, window),
            UpdateReply::NotProcessing(JobStatus::WaitingForAck)
        );
        assert_eq!(JobStatus::WaitingForAck.as_gitlab_str(), "pending");
    }

    #[test]
    fn running_job_is_dropped_after_its_timeout_plus_the_margin() {
        let spec = JobSpec {
            timeout: 10,
            ..JobSpec::default()
        };
        let mut job = running_job(spec, &[]);
        let since = job.running_since.unwrap();
        let margin = Duration::from_secs(5);
        assert!(!job.drop_if_timed_out(since + Duration::from_secs(14), margin));
        assert!(job.drop_if_timed_out(since + Duration::from_secs(15), margin));
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(
            job.failure_reason.as_deref(),
            Some("server_timeout_running")
        );
    }

    #[test]
    fn trace_appends_only_at_the_stored_length() {
        let mut job = running_job(JobSpec::default(), &[]);
        assert_eq!(
            job.append_trace(Some(0), Some(&b"hello "[..]), 100),
            TraceReply::Appended {
                length: 6,
                status: JobStatus::Running
            }
        );
        assert_eq!(
            job.append_trace(Some(3), Some(&b"xx"[..]), 100),
            TraceReply::RangeMismatch {
                length: 6,
                status: JobStatus::Running
            }
        );
        assert_eq!(
            job.append_trace(None, Some(&b"xx"[..]), 100),
            TraceReply::MissingRange
        );
        assert_eq!(
            job.append_trace(Some(6), Some(&b"world"[..]), 100),
            TraceReply::Appended {
                length: 11,
                status: JobStatus::Running
            }
        );
        assert_eq!(job.trace, b"hello world");
        let expected = format!("crc32:{:08x}", crc32fast::hash(b"hello world"));
        assert_eq!(job.trace_checksum(), expected);
    }

    #[test]
    fn trace_over_the_limit_fails_the_job() {
        let mut job = running_job(JobSpec::default(), &[]);
        assert_eq!(
            job.append_trace(Some(0), Some(&b"0123456789"[..]), 5),
            TraceReply::SizeExceeded
        );
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(job.failure_reason.as_deref(), Some("trace_size_exceeded"));
        assert_eq!(
            job.append_trace(Some(0), Some(&b"x"[..]), 5),
            TraceReply::NotProcessing(JobStatus::Failed)
        );
    }

    #[test]
    fn missing_feature_is_reported() {
        let spec = JobSpec {
            required_features: vec!["refspecs".into(), "multi_build_steps".into()],
            ..JobSpec::default()
        };
        let job = Job::new(1, "t".into(), spec, 1, String::new(), Instant::now());
        assert_eq!(
            job.missing_feature(&features(&["refspecs"])),
            Some("multi_build_steps")
        );
        assert_eq!(
            job.missing_feature(&features(&["refspecs", "multi_build_steps"])),
            None
        );
    }
}
