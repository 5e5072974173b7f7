//! Everything GitLab remembers: runners, their queues and jobs. Pure: no IO, no tokio; time comes
//! in as `now`. The server keeps one `State` behind a mutex and wakes waiters after each change.

mod job;
mod registration;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::distr::Alphanumeric;

use crate::control::{EnqueuedJob, JobSpec, JobStatus, JobView, RunnerView};
use crate::payload::{DependencyInput, PayloadInput};

use job::Job;
pub(crate) use job::{FAILURE_REASONS, JobUpdate, StoredArtifact, TraceReply, UpdateReply};
pub(crate) use registration::Registration;

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

/// The parts of a `POST /jobs/request` body GitLab uses (runner-protocol.md §3.1).
#[derive(Debug, Clone, Default)]
pub(crate) struct JobRequest {
    pub token: String,
    pub system_id: Option<String>,
    pub info: Option<serde_json::Value>,
}

impl JobRequest {
    /// `info.features` as booleans; anything but `true` counts as absent.
    fn features(&self) -> BTreeMap<String, bool> {
        self.info
            .as_ref()
            .and_then(|info| info.get("features"))
            .and_then(serde_json::Value::as_object)
            .map(|features| {
                features
                    .iter()
                    .map(|(name, value)| (name.clone(), value.as_bool().unwrap_or(false)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A job given to a runner.
#[derive(Debug)]
pub(crate) struct Handout {
    pub payload: PayloadInput,
    /// Set for two-phase jobs: when the retry worker first looks at the job.
    pub ack_deadline: Option<Instant>,
}

/// What GitLab's retry worker (`Ci::RetryStuckWaitingJobWorker`) finds when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckCheck {
    /// The key expired: the job failed with `runner_provisioning_timeout`, and was retried as
    /// the given new job if retries remained.
    Dropped { retried_as: Option<u64> },
    /// Still waiting (keep-alives renewed the key): run again at this instant.
    NotYet(Instant),
    /// Acknowledged, canceled or gone: nothing to do.
    Settled,
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnqueueError {
    #[error("runner_token is missing")]
    MissingRunnerToken,
    #[error("unknown runner token (add it with --runner-token or POST /control/runners)")]
    UnknownRunner,
    #[error("script is missing")]
    MissingScript,
    #[error("dependency {0} is not a known job")]
    UnknownDependency(u64),
}

/// Why a job token may not touch an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArtifactAccess {
    NotFound,
    Forbidden,
    NotProcessing(JobStatus),
}

/// Whether an uploaded file may be kept (Rails refuses a second, different file of a type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UploadDecision {
    Store,
    /// Same bytes as the stored one: success without change.
    Identical,
    Conflict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ManagerRemoval {
    UnknownRunner,
    UnknownManager,
    Removed,
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
}

/// GitLab examines at most this many queued builds per request (`MAX_QUEUE_DEPTH`).
const MAX_QUEUE_DEPTH: usize = 45;

/// `job_info.queue_size` and `queue_depth` of one hand-out.
#[derive(Debug, Clone, Copy)]
struct QueueMetrics {
    /// Candidate builds for this runner when it asked.
    size: usize,
    /// 1-based position of the build it got among them.
    depth: usize,
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
            rules,
        }
    }

    // ---- runners -------------------------------------------------------------------------

    /// Adds a runner token (idempotent).
    pub fn add_runner(&mut self, token: &str) -> RunnerView {
        let next_id = &mut self.next_runner_id;
        self.runners
            .entry(token.to_owned())
            .or_insert_with(|| {
                let id = *next_id;
                *next_id += 1;
                Runner {
                    id,
                    uuid: random_hex(32),
                    queue_value: random_hex(32),
                    requests: 0,
                    system_ids: Vec::new(),
                    last_info: None,
                    pending: BTreeSet::new(),
                    orphaned: None,
                    description: None,
                    tags: Vec::new(),
                }
            })
            .view(token)
    }

    /// `POST /runners/verify`: the runner id, remembering the manager.
    pub fn verify_runner(&mut self, token: &str, system_id: Option<&str>) -> Option<u64> {
        let runner = self.runners.get_mut(token)?;
        runner.remember_system_id(system_id);
        Some(runner.id)
    }

    /// Makes a runner orphaned (`Some(403 | 422)`) or heals it (`None`). `false` if unknown.
    pub fn set_orphaned(&mut self, token: &str, status: Option<u16>) -> bool {
        self.runners
            .get_mut(token)
            .map(|runner| runner.orphaned = status)
            .is_some()
    }

    /// The status GitLab answers an orphaned runner with, if this one is.
    pub fn orphaned(&self, token: &str) -> Option<u16> {
        self.runners.get(token).and_then(|runner| runner.orphaned)
    }

    /// `DELETE /runners`: the runner is gone, its token refused from now on.
    pub fn remove_runner(&mut self, token: &str) -> bool {
        self.runners.remove(token).is_some()
    }

    /// `DELETE /runners/managers`: forgets one `system_id`; the token stays valid.
    pub fn remove_manager(&mut self, token: &str, system_id: &str) -> ManagerRemoval {
        let Some(runner) = self.runners.get_mut(token) else {
            return ManagerRemoval::UnknownRunner;
        };
        let before = runner.system_ids.len();
        runner.system_ids.retain(|known| known != system_id);
        if runner.system_ids.len() == before {
            ManagerRemoval::UnknownManager
        } else {
            ManagerRemoval::Removed
        }
    }

    pub fn queue_value(&self, token: &str) -> Option<&str> {
        self.runners.get(token).map(|r| r.queue_value.as_str())
    }

    fn tick_queue(&mut self, token: &str) {
        if let Some(runner) = self.runners.get_mut(token) {
            runner.queue_value = random_hex(32);
        }
    }

    pub fn runner_view(&self, token: &str) -> Option<RunnerView> {
        self.runners.get(token).map(|runner| runner.view(token))
    }

    pub fn runner_views(&self) -> Vec<RunnerView> {
        self.runners
            .iter()
            .map(|(token, runner)| runner.view(token))
            .collect()
    }

    // ---- jobs ----------------------------------------------------------------------------

    /// Queues a job for its runner token and wakes that queue's long polls.
    pub fn enqueue(&mut self, spec: JobSpec, now: Instant) -> Result<EnqueuedJob, EnqueueError> {
        if spec.runner_token.is_empty() {
            return Err(EnqueueError::MissingRunnerToken);
        }
        if !self.runners.contains_key(&spec.runner_token) {
            return Err(EnqueueError::UnknownRunner);
        }
        if spec.script.is_empty() {
            return Err(EnqueueError::MissingScript);
        }
        if let Some(&unknown) = spec
            .dependencies
            .iter()
            .find(|id| !self.jobs.contains_key(id))
        {
            return Err(EnqueueError::UnknownDependency(unknown));
        }
        Ok(self.insert_job(spec, now))
    }

    /// Creates a pending job (new id and token) and wakes its queue's long polls.
    fn insert_job(&mut self, spec: JobSpec, now: Instant) -> EnqueuedJob {
        let pipeline_id = match spec.pipeline_id {
            Some(id) => id,
            None => match spec.dependencies.first().and_then(|id| self.jobs.get(id)) {
                Some(predecessor) => predecessor.pipeline_id,
                None => {
                    let id = self.next_pipeline_id;
                    self.next_pipeline_id += 1;
                    id
                }
            },
        };
        self.next_pipeline_id = self.next_pipeline_id.max(pipeline_id + 1);
        let sha = spec.sha.clone().unwrap_or_else(|| random_hex(40));

        let id = self.next_job_id;
        self.next_job_id += 1;
        // GitLab job tokens start `glcbt-` (runner-protocol.md §3.4) so runners mask them.
        let token = format!("glcbt-{}", random_alphanumeric(24));
        let runner_token = spec.runner_token.clone();
        self.job_ids_by_token.insert(token.clone(), id);
        self.jobs
            .insert(id, Job::new(id, token.clone(), spec, pipeline_id, sha, now));
        if let Some(runner) = self.runners.get_mut(&runner_token) {
            runner.pending.insert(id);
        }
        self.tick_queue(&runner_token);
        EnqueuedJob { id, token }
    }

    /// Counts a job request and remembers its `system_id` and `info`. `None` for an unknown
    /// token. Returns the queue's current value (for the `last_update` comparison).
    pub fn record_request(&mut self, request: &JobRequest) -> Option<String> {
        let runner = self.runners.get_mut(&request.token)?;
        runner.requests += 1;
        runner.remember_system_id(request.system_id.as_deref());
        if request.info.is_some() {
            runner.last_info.clone_from(&request.info);
        }
        Some(runner.queue_value.clone())
    }

    /// Rails' job assignment: the oldest pending job of this runner token, dropping the ones the
    /// runner cannot run as `runner_unsupported` on the way (runner-protocol.md §3.1).
    pub fn take_job(&mut self, request: &JobRequest, now: Instant) -> Option<Handout> {
        let features = request.features();
        let token = request.token.as_str();
        let queue_size = self.runners.get(token)?.pending.len();
        let mut depth = 0;
        loop {
            let runner = self.runners.get_mut(token)?;
            let id = runner.pending.pop_first()?;
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            if job.status != JobStatus::Pending || job.spec.runner_token != token {
                continue;
            }
            depth += 1;
            if let Some(missing) = job.missing_feature(&features) {
                tracing::info!(
                    job.id = id,
                    feature = missing,
                    "dropping job: runner_unsupported"
                );
                job.drop_unsupported(request.system_id.clone(), features.clone());
                continue;
            }
            let time_in_queue = now.saturating_duration_since(job.queued_at);
            // Two-phase needs the flag, the runner's feature and a runner manager to wait for.
            let two_phase = features
                .get("two_phase_job_commit")
                .copied()
                .unwrap_or(false)
                && request.system_id.is_some();
            let ack_window = self.rules.ack_window.filter(|_| two_phase);
            job.hand_out(request.system_id.clone(), features, now, ack_window);
            let ack_deadline = job.ack_deadline;
            let queue = QueueMetrics {
                size: queue_size,
                depth: depth.min(MAX_QUEUE_DEPTH),
            };
            let payload = self.payload_input(id, time_in_queue, queue)?;
            return Some(Handout {
                payload,
                ack_deadline,
            });
        }
    }

    fn payload_input(
        &self,
        id: u64,
        time_in_queue: Duration,
        queue: QueueMetrics,
    ) -> Option<PayloadInput> {
        let job = self.jobs.get(&id)?;
        let project_running = self
            .jobs
            .values()
            .filter(|other| {
                other.spec.project_id == job.spec.project_id
                    && matches!(other.status, JobStatus::Running | JobStatus::Canceling)
            })
            .count();
        let runner = self.runners.get(&job.spec.runner_token)?;
        let dependencies = job
            .spec
            .dependencies
            .iter()
            .filter_map(|dep_id| self.jobs.get(dep_id))
            .map(|dep| DependencyInput {
                id: dep.id,
                name: dep.spec.name.clone(),
                archive: dep
                    .artifacts
                    .get("archive")
                    .map(|a| (a.filename.clone(), a.size)),
            })
            .collect();
        Some(PayloadInput {
            job_id: job.id,
            job_token: job.token.clone(),
            spec: job.spec.clone(),
            pipeline_id: job.pipeline_id,
            sha: job.sha.clone(),
            time_in_queue,
            queue_size: queue.size,
            queue_depth: queue.depth,
            project_jobs_running: project_running,
            runner_uuid: runner.uuid.clone(),
            dependencies,
        })
    }

    /// GitLab's retry worker for a job handed out under two-phase commit: while the key lives
    /// it comes back a quarter-window later; once it has expired the job fails with
    /// `runner_provisioning_timeout` and auto-retry creates a new job (runner-protocol.md §3.5).
    pub fn check_ack(&mut self, id: u64, now: Instant) -> AckCheck {
        let Some(window) = self.rules.ack_window else {
            return AckCheck::Settled;
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            return AckCheck::Settled;
        };
        if job.status != JobStatus::WaitingForAck {
            return AckCheck::Settled;
        }
        if job.waiting_for_ack(now) {
            return AckCheck::NotYet(now + Rules::retry_worker_period(window));
        }
        tracing::info!(
            job.id = id,
            "no acknowledgement within the window: failed (runner_provisioning_timeout)"
        );
        job.fail_unacknowledged();
        let retry = (job.retry_count < self.rules.provisioning_retries)
            .then(|| (job.spec.clone(), job.retry_count + 1));
        let retried_as = retry.map(|(spec, retry_count)| {
            let retried = self.insert_job(spec, now);
            if let Some(new_job) = self.jobs.get_mut(&retried.id) {
                new_job.retry_of = Some(id);
                new_job.retry_count = retry_count;
            }
            retried.id
        });
        if let Some(job) = self.jobs.get_mut(&id) {
            job.retried_as = retried_as;
        }
        AckCheck::Dropped { retried_as }
    }

    /// Whether any job would be dropped by [`State::drop_timed_out`] (read-only, so the sweep
    /// does not wake every waiter each tick).
    pub fn has_timed_out(&self, now: Instant, margin: Duration) -> bool {
        self.jobs.values().any(|job| job.is_timed_out(now, margin))
    }

    /// `Ci::TimedOutBuilds::DropRunningService`: fails every job still running `margin` past
    /// its timeout. Returns the ids it failed.
    pub fn drop_timed_out(&mut self, now: Instant, margin: Duration) -> Vec<u64> {
        self.jobs
            .values_mut()
            .filter_map(|job| job.drop_if_timed_out(now, margin).then_some(job.id))
            .collect()
    }

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
        self.jobs.get_mut(&id).map(|job| job.cancel(force))
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

    // ---- artifacts -----------------------------------------------------------------------

    /// Upload needs the job's own token while it runs (or is canceling, for `when: always`).
    pub fn authorize_upload(&self, id: u64, token: &str) -> Result<(), ArtifactAccess> {
        let job = self.jobs.get(&id).ok_or(ArtifactAccess::NotFound)?;
        if job.token != token {
            return Err(ArtifactAccess::Forbidden);
        }
        match job.status {
            JobStatus::Running | JobStatus::Canceling => Ok(()),
            other => Err(ArtifactAccess::NotProcessing(other)),
        }
    }

    pub fn upload_decision(
        &self,
        id: u64,
        artifact_type: &str,
        sha256: &[u8; 32],
    ) -> UploadDecision {
        match self
            .jobs
            .get(&id)
            .and_then(|job| job.artifacts.get(artifact_type))
        {
            None => UploadDecision::Store,
            Some(stored) if &stored.sha256 == sha256 => UploadDecision::Identical,
            Some(_) => UploadDecision::Conflict,
        }
    }

    pub fn record_artifact(&mut self, id: u64, artifact: StoredArtifact) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        self.storage_keys.insert(
            artifact.storage_key.clone(),
            (id, artifact.artifact_type.clone()),
        );
        if let Some(old) = job
            .artifacts
            .insert(artifact.artifact_type.clone(), artifact)
        {
            self.storage_keys.remove(&old.storage_key);
        }
    }

    /// Download of job `id`'s archive with a job token: the job's own, or that of a running job
    /// that lists `id` among its dependencies (runner-protocol.md §7.2).
    pub fn authorize_download(
        &self,
        id: u64,
        token: &str,
    ) -> Result<StoredArtifact, ArtifactAccess> {
        let target = self.jobs.get(&id).ok_or(ArtifactAccess::NotFound)?;
        let caller = self
            .job_ids_by_token
            .get(token)
            .and_then(|caller_id| self.jobs.get(caller_id))
            .ok_or(ArtifactAccess::Forbidden)?;
        let allowed = caller.id == id
            || (matches!(caller.status, JobStatus::Running | JobStatus::Canceling)
                && caller.spec.dependencies.contains(&id));
        if !allowed {
            return Err(ArtifactAccess::Forbidden);
        }
        target
            .artifacts
            .get("archive")
            .cloned()
            .ok_or(ArtifactAccess::NotFound)
    }

    pub fn artifact(&self, id: u64, artifact_type: &str) -> Option<StoredArtifact> {
        self.jobs.get(&id)?.artifacts.get(artifact_type).cloned()
    }

    pub fn artifact_by_storage_key(&self, key: &str) -> Option<StoredArtifact> {
        let (id, artifact_type) = self.storage_keys.get(key)?;
        self.artifact(*id, artifact_type)
    }
}

/// A fresh unguessable storage key.
pub(crate) fn new_storage_key() -> String {
    random_alphanumeric(32)
}

#[cfg(test)]
mod tests;
