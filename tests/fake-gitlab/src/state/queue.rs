//! Job queues and job requests: queueing a job for a runner token, the queue value Workhorse
//! watches, and Rails' assignment of the oldest pending job a runner can run (runner-protocol.md
//! §3.1, §3.3).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::control::{EnqueuedJob, JobSpec, JobStatus};
use crate::payload::{DependencyInput, PayloadInput};

use super::{Job, State, random_alphanumeric, random_hex};

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
    #[error("a pipeline needs at least one stage, and every stage at least one job")]
    EmptyStage,
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

impl State {
    pub fn queue_value(&self, token: &str) -> Option<&str> {
        self.runners.get(token).map(|r| r.queue_value.as_str())
    }

    fn tick_queue(&mut self, token: &str) {
        if let Some(runner) = self.runners.get_mut(token) {
            runner.queue_value = random_hex(32);
        }
    }

    /// Queues a job for its runner token and wakes that queue's long polls.
    pub fn enqueue(&mut self, spec: JobSpec, now: Instant) -> Result<EnqueuedJob, EnqueueError> {
        self.check_spec(&spec)?;
        Ok(self.insert_job(spec, now))
    }

    /// What `enqueue` refuses.
    pub(super) fn check_spec(&self, spec: &JobSpec) -> Result<(), EnqueueError> {
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
        Ok(())
    }

    /// Creates a pending job (new id and token) and wakes its queue's long polls.
    pub(super) fn insert_job(&mut self, spec: JobSpec, now: Instant) -> EnqueuedJob {
        let created = self.insert_created_job(spec, now);
        self.make_pending(created.id, now);
        created
    }

    /// Creates a job in `created`, not yet in its runner's queue (a later stage's).
    pub(super) fn insert_created_job(&mut self, spec: JobSpec, now: Instant) -> EnqueuedJob {
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
        self.job_ids_by_token.insert(token.clone(), id);
        let mut job = Job::new(id, token.clone(), spec, pipeline_id, sha, now);
        job.status = JobStatus::Created;
        self.jobs.insert(id, job);
        self.index_job(id);
        self.fresh.push(id);
        EnqueuedJob { id, token }
    }

    /// A created job becomes pending: into its runner's queue, whose long polls wake.
    pub(super) fn make_pending(&mut self, id: u64, now: Instant) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.status = JobStatus::Pending;
        job.queued_at = now;
        self.newly_pending.push(id);
        let runner_token = job.spec.runner_token.clone();
        if let Some(runner) = self.runners.get_mut(&runner_token) {
            runner.pending.insert(id);
        }
        self.tick_queue(&runner_token);
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
                // Failed before assignment: GitLab still stamps its `finished_at`.
                self.unsettled.insert(id);
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
            self.unsettled.insert(id);
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
}
