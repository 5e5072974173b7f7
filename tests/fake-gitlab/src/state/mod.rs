//! Everything GitLab remembers: runners, their queues and jobs. Pure: no IO, no tokio; time comes
//! in as `now`. The server keeps one `State` behind a mutex and wakes waiters after each change.
//! This file holds the data and the runner's calls on a job; runners, queues, artifacts and
//! GitLab's background workers have a file each.

mod api_tokens;
mod artifacts;
mod entities;
mod history;
mod job;
mod pipeline_jobs;
mod pipelines;
mod queue;
mod registration;
mod runners;
mod schedules;
mod workers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::distr::Alphanumeric;

use crate::control::{JobStatus, JobView, RunnerView};

pub(crate) use api_tokens::ApiRefusal;
pub(crate) use artifacts::{ArtifactAccess, UploadDecision, new_storage_key};
pub(crate) use entities::{Entity, Render};
use job::Job;
pub(crate) use job::{FAILURE_REASONS, JobUpdate, StoredArtifact, TraceReply, UpdateReply};
pub(crate) use pipeline_jobs::{JobsFilter, ProjectRef};
pub(crate) use queue::JobRequest;
pub(crate) use registration::Registration;
pub(crate) use runners::ManagerRemoval;
pub(crate) use workers::AckCheck;

#[derive(Debug)]
struct Runner {
    id: u64,
    uuid: String,
    /// The value Workhorse watches (`runner:build_queue:<token>`); changes whenever a job
    /// becomes pending for this runner (runner-protocol.md §3.3).
    queue_value: String,
    requests: u64,
    system_ids: Vec<String>,
    last_info: Option<serde_json::Value>,
    /// Ids of this runner's jobs that became pending, oldest first. Entries whose job left
    /// `pending` some other way are dropped when met, so a request never scans every job.
    pending: BTreeSet<u64>,
    /// Set when the test makes the runner orphaned: job requests and verify are answered with
    /// this status and "Runner is orphaned" (403 or 422, after GitLab's `reject_orphaned_runners`).
    orphaned: Option<u16>,
    /// What `POST /api/v4/runners` said about it (nothing for tokens added by the test).
    description: Option<String>,
    tags: Vec<String>,
}

impl Runner {
    fn remember_system_id(&mut self, system_id: Option<&str>) {
        if let Some(system_id) = system_id
            && !self.system_ids.iter().any(|known| known == system_id)
        {
            self.system_ids.push(system_id.to_owned());
        }
    }

    fn view(&self, token: &str) -> RunnerView {
        RunnerView {
            token: token.to_owned(),
            requests: self.requests,
            system_ids: self.system_ids.clone(),
            last_info: self.last_info.clone(),
            description: self.description.clone(),
            tags: self.tags.clone(),
        }
    }
}

/// The GitLab rules the state applies, from the server's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// `Some(window)` when two-phase commit is on (the feature flag).
    pub ack_window: Option<Duration>,
    pub trace_limit: u64,
    pub provisioning_retries: u32,
}

impl Rules {
    /// GitLab reschedules its retry worker every 30 s while a job waits, a quarter of the
    /// 2-minute window; scaled windows keep that proportion.
    fn retry_worker_period(window: Duration) -> Duration {
        window / 4
    }
}

#[derive(Debug)]
pub(crate) struct State {
    runners: BTreeMap<String, Runner>,
    /// Registration tokens `POST /api/v4/runners` accepts (GitLab's legacy registration).
    registration_tokens: BTreeSet<String>,
    jobs: BTreeMap<u64, Job>,
    job_ids_by_token: HashMap<String, u64>,
    /// `/storage/<key>` → (job id, artifact type).
    storage_keys: HashMap<String, (u64, String)>,
    next_runner_id: u64,
    next_job_id: u64,
    next_pipeline_id: u64,
    rules: Rules,
    /// API tokens (personal, group, project access tokens) by their secret.
    api_tokens: BTreeMap<String, api_tokens::ApiToken>,
    /// Projects named by jobs: id → the first path given with it.
    projects: BTreeMap<u64, String>,
    /// Every job of each pipeline id, oldest first (retries included).
    pipeline_job_ids: BTreeMap<u64, Vec<u64>>,
    /// Jobs' wall-clock times, for the REST API.
    times: BTreeMap<u64, history::JobTimes>,
    /// Jobs enqueued since the last stamp, whose creation time is still to be written.
    fresh: Vec<u64>,
    /// Jobs made pending since the last stamp, whose `queued_at` is still to be written.
    newly_pending: Vec<u64>,
    /// Pipelines whose later stages are still to run.
    pipelines: BTreeMap<u64, pipelines::Pipeline>,
    /// Pipeline schedules a test set, oldest first.
    schedules: Vec<schedules::Schedule>,
    /// Jobs handed to a runner and not finished, or just canceled or dropped before one took
    /// them, whose times may still change: only these are looked at on every change (a queue of
    /// thousands of pending jobs is not).
    unsettled: BTreeSet<u64>,
}

fn random_alphanumeric(len: usize) -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

fn random_hex(len: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(HEX[rng.random_range(0..HEX.len())]))
        .collect()
}

impl State {
    pub fn new(rules: Rules) -> Self {
        State {
            runners: BTreeMap::new(),
            registration_tokens: BTreeSet::new(),
            jobs: BTreeMap::new(),
            job_ids_by_token: HashMap::new(),
            storage_keys: HashMap::new(),
            next_runner_id: 1,
            next_job_id: 1,
            next_pipeline_id: 1,
            api_tokens: BTreeMap::new(),
            projects: BTreeMap::new(),
            pipeline_job_ids: BTreeMap::new(),
            times: BTreeMap::new(),
            fresh: Vec::new(),
            newly_pending: Vec::new(),
            unsettled: BTreeSet::new(),
            pipelines: BTreeMap::new(),
            schedules: Vec::new(),
            rules,
        }
    }

    // ---- jobs ----------------------------------------------------------------------------

    fn job_with_token(&mut self, id: u64, token: &str) -> Result<&mut Job, ArtifactAccess> {
        let job = self.jobs.get_mut(&id).ok_or(ArtifactAccess::NotFound)?;
        if job.token != token {
            return Err(ArtifactAccess::Forbidden);
        }
        Ok(job)
    }

    /// `PUT /jobs/:id`.
    pub fn update_job(
        &mut self,
        id: u64,
        token: &str,
        update: &JobUpdate,
        now: Instant,
    ) -> UpdateReply {
        let ack_window = self.rules.ack_window.unwrap_or_default();
        match self.job_with_token(id, token) {
            Ok(job) => job.update(update, now, ack_window),
            Err(ArtifactAccess::NotFound) => UpdateReply::NotFound,
            Err(_) => UpdateReply::Forbidden,
        }
    }

    /// `PATCH /jobs/:id/trace`.
    pub fn append_trace(
        &mut self,
        id: u64,
        token: &str,
        start: Option<u64>,
        body: Option<&[u8]>,
    ) -> TraceReply {
        let limit = self.rules.trace_limit;
        match self.job_with_token(id, token) {
            Ok(job) => job.append_trace(start, body, limit),
            Err(ArtifactAccess::NotFound) => TraceReply::NotFound,
            Err(_) => TraceReply::Forbidden,
        }
    }

    pub fn trace(&self, id: u64) -> Option<Vec<u8>> {
        self.jobs.get(&id).map(|job| job.trace.clone())
    }

    /// Cancels a job (control API). `None` for an unknown id.
    pub fn cancel(&mut self, id: u64, force: bool) -> Option<JobStatus> {
        let job = self.jobs.get_mut(&id)?;
        let was_final = job.status.is_final();
        let status = job.cancel(force);
        // GitLab stamps `finished_at` on `canceled` even for a job no runner took.
        if !was_final {
            self.unsettled.insert(id);
        }
        Some(status)
    }

    pub fn job_view(&self, id: u64) -> Option<JobView> {
        self.jobs.get(&id).map(Job::view)
    }

    pub fn job_status(&self, id: u64) -> Option<JobStatus> {
        self.jobs.get(&id).map(|job| job.status)
    }

    pub fn job_views(&self) -> Vec<JobView> {
        self.jobs.values().map(Job::view).collect()
    }
}

/// A state for the state modules' unit tests: one-phase hand-outs, no auto-retry, and the
/// runner `runner` registered.
#[cfg(test)]
pub(crate) fn test_state(runner: &str) -> State {
    let mut s = State::new(Rules {
        ack_window: None,
        trace_limit: 1 << 20,
        provisioning_retries: 0,
    });
    s.add_runner(runner);
    s
}

#[cfg(test)]
mod tests;
