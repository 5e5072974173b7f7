//! The JSON types of the control API, shared by the server and [`super::Client`].
//!
//! Field names and shapes are the contract in `README.md` ("Control API"); a test in another
//! process may speak it with plain JSON, so keep them stable.

mod job_spec;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use job_spec::{
    ArtifactSpec, CreatedPipeline, CreatedSchedule, JobBatch, JobSpec, JobVariable, NewPipeline,
    ScheduleSpec,
};

/// Answer to `POST /control/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueuedJob {
    pub id: u64,
    /// The job token (`glcbt-…`).
    pub token: String,
}

/// A job's state. `WaitingForAck` is the fake's name for GitLab's "pending, handed out, waiting
/// in the ack queue" (runner-protocol.md §3.5); on the wire (`Job-Status`) it reads `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// In a pipeline, waiting for the stages before its own to end (GitLab's `created`).
    Created,
    Pending,
    WaitingForAck,
    Running,
    Canceling,
    Canceled,
    Success,
    Failed,
    /// Never ran: a stage before its own did not succeed (GitLab's `skipped`).
    Skipped,
}

impl JobStatus {
    /// `success`, `failed`, `canceled` or `skipped`: nothing changes any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Success | JobStatus::Failed | JobStatus::Canceled | JobStatus::Skipped
        )
    }

    /// `running` or any state a running job can reach.
    pub fn is_running_or_later(self) -> bool {
        !matches!(
            self,
            JobStatus::Created | JobStatus::Pending | JobStatus::WaitingForAck
        )
    }

    /// The value GitLab puts in the `Job-Status` header.
    pub fn as_gitlab_str(self) -> &'static str {
        match self {
            JobStatus::Created => "created",
            JobStatus::Pending | JobStatus::WaitingForAck => "pending",
            JobStatus::Running => "running",
            JobStatus::Canceling => "canceling",
            JobStatus::Canceled => "canceled",
            JobStatus::Success => "success",
            JobStatus::Failed => "failed",
            JobStatus::Skipped => "skipped",
        }
    }

    /// The name used by the control API (`waiting_for_ack` stays distinct).
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::WaitingForAck => "waiting_for_ack",
            other => other.as_gitlab_str(),
        }
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a job looks like to a test (`GET /control/jobs/:id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    pub runner_token: String,
    pub status: JobStatus,
    pub failure_reason: Option<String>,
    pub exit_code: Option<i64>,
    pub trace_bytes: u64,
    /// `crc32:%08x` of the stored trace, comparable with the runner's `output.checksum`.
    pub trace_crc32: String,
    pub reported_checksum: Option<String>,
    pub reported_bytesize: Option<u64>,
    pub artifacts: Vec<ArtifactView>,
    pub final_put_attempts: u32,
    /// `system_id` of the job request that took the job.
    pub system_id: Option<String>,
    /// `info.features` of the job request that took the job.
    pub runner_features: Option<BTreeMap<String, bool>>,
    /// How many times the job was handed out (GitLab never hands a job out twice: 0 or 1).
    #[serde(default)]
    pub handouts: u32,
    /// The job this one retries (GitLab's auto-retry after `runner_provisioning_timeout`).
    #[serde(default)]
    pub retry_of: Option<u64>,
    /// The new job GitLab created to retry this one, if any.
    #[serde(default)]
    pub retried_as: Option<u64>,
}

/// An uploaded artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactView {
    pub artifact_type: String,
    pub artifact_format: String,
    pub filename: String,
    pub size: u64,
    pub expire_in: Option<String>,
}

/// One known runner token (`GET /control/runners`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerView {
    pub token: String,
    /// `POST /api/v4/jobs/request` calls seen with this token (held ones included).
    pub requests: u64,
    /// Every `system_id` seen (job requests and verify), in order of first appearance.
    pub system_ids: Vec<String>,
    /// The `info` object of the last job request or verify.
    pub last_info: Option<serde_json::Value>,
    /// `description` and `tag_list` of its registration (`POST /api/v4/runners`), as GitLab
    /// stored them: a list, a comma-separated string, and of a form field given twice only the
    /// last value (Rack).
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Body of `POST /control/runners`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRunner {
    pub token: String,
}

/// Body of `POST /control/api_tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewApiToken {
    pub token: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// What `GET /api/v4/personal_access_tokens/self` calls it; default `api-token-<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Answer to `POST /control/jobs/:id/cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelOutcome {
    /// `canceling` or `canceled`; for a job that had already finished, its final status.
    pub status: JobStatus,
}

/// A fault injected into `/api/v4/*` requests (`POST /control/faults`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// HTTP methods the rule applies to; empty = all.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Request path prefix, e.g. `/api/v4/jobs`; none = every `/api/v4` path.
    #[serde(default)]
    pub path_prefix: Option<String>,
    pub action: FaultAction,
    /// How many requests the rule hits before it disappears.
    #[serde(default)]
    pub count: Option<u64>,
    /// How long after creation the rule lives.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

impl FaultRule {
    /// A rule with `action` for every `/api/v4` request, until deleted.
    pub fn new(action: FaultAction) -> Self {
        FaultRule {
            methods: Vec::new(),
            path_prefix: None,
            action,
            count: None,
            duration_ms: None,
        }
    }

    /// Restrict to these HTTP methods.
    pub fn methods(mut self, methods: &[&str]) -> Self {
        self.methods = methods.iter().map(|m| (*m).to_owned()).collect();
        self
    }

    /// Restrict to paths starting with `prefix`.
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Hit at most `count` requests.
    pub fn count(mut self, count: u64) -> Self {
        self.count = Some(count);
        self
    }

    /// Live for `duration` after creation.
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

/// What a matching fault rule does to the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultAction {
    /// Answer this status without running the handler, with `Retry-After: <seconds>` if given.
    Status {
        status: u16,
        #[serde(default)]
        retry_after: Option<u64>,
    },
    /// Close the TCP connection without answering.
    Drop,
    /// Answer normally after `ms` milliseconds.
    Delay { ms: u64 },
}

/// Answer to `POST /control/faults`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultId {
    pub id: u64,
}

/// Request counters (`GET /control/stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// `"<METHOD> <route template>"` → status (or `"dropped"`) → count.
    pub requests: BTreeMap<String, BTreeMap<String, u64>>,
    pub faults_injected: u64,
}

impl Stats {
    /// How many `route` requests (e.g. `"PATCH /api/v4/jobs/:id/trace"`) got `status`
    /// (e.g. `"202"` or `"dropped"`).
    pub fn count(&self, route: &str, status: &str) -> u64 {
        self.requests
            .get(route)
            .and_then(|by_status| by_status.get(status))
            .copied()
            .unwrap_or(0)
    }

    /// How many `route` requests were seen, whatever their outcome.
    pub fn total(&self, route: &str) -> u64 {
        self.requests
            .get(route)
            .map(|by_status| by_status.values().sum())
            .unwrap_or(0)
    }
}

/// What `GET /control/jobs/:id?wait=` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    /// `running` or any later state.
    Running,
    /// `success`, `failed` or `canceled`.
    Final,
}

impl WaitFor {
    pub fn is_reached(self, status: JobStatus) -> bool {
        match self {
            WaitFor::Running => status.is_running_or_later(),
            WaitFor::Final => status.is_final(),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WaitFor::Running => "running",
            WaitFor::Final => "final",
        }
    }
}
