//! The upstream poller of one pool: asks GitLab for jobs while the pool's sidecars wait for one.
//!
//! Up to `request_concurrency` requests are in flight, never more than the pool's demand
//! (preemptive intake). A request in flight is never cancelled on purpose: GitLab may already
//! have assigned a job to it, and dropping the connection would strand that job. Jobs that
//! arrive when nobody waits any more are queued for the next request.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{self, UpstreamConfig};
use crate::core::JobId;
use crate::core::backoff::Backoff;
use crate::jobs::{Accepted, Jobs, Reissue};
use crate::pools::Pool;
use crate::sidecars::Sidecars;
use crate::upstream::{JobRequest, JobRequestOutcome, Upstream, UpstreamError};

#[derive(Debug)]
pub struct Intake {
    pub pool: Arc<Pool>,
    pub upstream: Arc<dyn Upstream>,
    pub jobs: Arc<Jobs>,
    pub sidecars: Arc<Sidecars>,
    pub poll_interval: Duration,
}

/// What one job request came to, for the loop's pacing.
#[derive(Debug)]
enum Round {
    Job(JobId),
    /// `204`. `rails_short_circuit` when GitLab echoed the `last_update` we sent: it is not
    /// long-polling, so we pace ourselves.
    NoJob {
        rails_short_circuit: bool,
    },
    Failed {
        retry_after: Option<Duration>,
        reason: String,
    },
    Forbidden,
}

impl Intake {
    pub fn new(
        pool: Arc<Pool>,
        upstream: Arc<dyn Upstream>,
        jobs: Arc<Jobs>,
        sidecars: Arc<Sidecars>,
        config: &UpstreamConfig,
    ) -> Self {
        Self {
            pool,
            upstream,
            jobs,
            sidecars,
            poll_interval: config.poll_interval,
        }
    }

    /// Runs until `stop` is cancelled and the requests in flight have come back (their jobs, if
    /// any, are queued and stored).
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let span = tracing::info_span!("intake", pool = %self.pool.name());
        async move {
            let mut changes = self.pool.queue.subscribe();
            let mut jobs_changed = self.jobs.subscribe();
            let mut in_flight: JoinSet<Round> = JoinSet::new();
            let mut not_before = Instant::now();
            let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
            let mut failing = false;
            loop {
                let want = self.want();
                while !stop.is_cancelled() && in_flight.len() < want && Instant::now() >= not_before {
                    let this = self.clone();
                    in_flight.spawn(async move { this.one_request().await }.in_current_span());
                }
                if stop.is_cancelled() && in_flight.is_empty() {
                    break;
                }
                let backing_off = in_flight.len() < want && Instant::now() < not_before;
                tokio::select! {
                    () = stop.cancelled(), if !stop.is_cancelled() => {}
                    Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                        let round = match done {
                            Ok(round) => round,
                            Err(e) => Round::Failed { retry_after: None, reason: format!("request task failed: {e}") },
                        };
                        let pause = self.pace(round, &mut backoff, &mut failing);
                        not_before = not_before.max(Instant::now() + pause);
                    }
                    _ = changes.changed() => {}
                    _ = jobs_changed.changed() => {}
                    () = tokio::time::sleep_until(not_before), if backing_off => {}
                }
            }
            tracing::debug!("intake stopped");
        }
        .instrument(span)
        .await;
    }

    /// Turns a round's result into the pause before the next request, logging state changes once.
    fn pace(&self, round: Round, backoff: &mut Backoff, failing: &mut bool) -> Duration {
        let recovered = |failing: &mut bool| {
            if std::mem::take(failing) {
                tracing::info!("GitLab answers job requests again");
            }
        };
        match round {
            Round::Job(id) => {
                recovered(failing);
                backoff.reset();
                tracing::debug!(job.id = %id, "job taken from GitLab");
                Duration::ZERO
            }
            Round::NoJob {
                rails_short_circuit,
            } => {
                recovered(failing);
                backoff.reset();
                if rails_short_circuit {
                    self.poll_interval
                } else {
                    Duration::ZERO
                }
            }
            Round::Failed {
                retry_after,
                reason,
            } => {
                let wait = backoff.fail(retry_after, rand::random::<f64>());
                if !std::mem::replace(failing, true) {
                    tracing::warn!(%reason, retry_in = ?wait, "job request to GitLab failed; backing off");
                } else {
                    tracing::debug!(%reason, retry_in = ?wait, failures = backoff.failures(), "job request failed again");
                }
                wait
            }
            Round::Forbidden => {
                let wait = backoff.fail(Some(Duration::from_secs(60)), rand::random::<f64>());
                if !std::mem::replace(failing, true) {
                    tracing::error!(retry_in = ?wait,
                        "GitLab refuses this pool's runner token (403): check upstream_token; no jobs will be taken");
                }
                wait
            }
        }
    }

    /// How many job requests should be in flight now.
    fn want(&self) -> usize {
        let limit = self.pool.config.request_concurrency as usize;
        let wanted = match self.pool.config.intake() {
            config::Intake::Preemptive => self.pool.queue.demand(),
            config::Intake::OnDemand => {
                // As many jobs as the pool could run at once; machines are made for them.
                let s = &self.pool.config.scaling;
                let capacity = s.max_machines as usize * s.capacity_per_machine as usize;
                capacity.saturating_sub(self.jobs.active_in_pool(self.pool.name()))
            }
        };
        wanted.min(limit)
    }

    async fn one_request(&self) -> Round {
        let mut info = self
            .sidecars
            .pool_info(self.pool.name())
            .unwrap_or_else(default_info);
        if let Some(features) = info
            .get_mut("features")
            .and_then(serde_json::Value::as_object_mut)
        {
            // Every job is acknowledged: by its sidecar's acceptance when handed out at once, by
            // the autoscaler once durable when it waits. Two-phase acceptance then lets GitLab
            // requeue a job we took but crashed before storing.
            features.insert("two_phase_job_commit".into(), serde_json::Value::Bool(true));
        }
        let sent_last_update = self.pool.last_update();
        let request = JobRequest {
            token: self.pool.config.upstream_token.clone(),
            system_id: self.pool.system_id.clone(),
            info,
            last_update: sent_last_update.clone(),
        };
        match self.upstream.request_job(request).await {
            Ok(JobRequestOutcome::Job { payload }) => self.take(&payload).await,
            Ok(JobRequestOutcome::NoJob { last_update }) => {
                let echoed = last_update.is_some() && last_update == sent_last_update;
                if let Some(value) = last_update {
                    self.pool.set_last_update(value);
                }
                Round::NoJob {
                    rails_short_circuit: echoed,
                }
            }
            Ok(JobRequestOutcome::Forbidden) => Round::Forbidden,
            Ok(JobRequestOutcome::RetryLater {
                status,
                retry_after,
            }) => Round::Failed {
                retry_after,
                reason: format!("GitLab answered {status}"),
            },
            Ok(JobRequestOutcome::Unexpected { status, detail }) => Round::Failed {
                retry_after: None,
                reason: format!("unexpected answer {status} ({detail})"),
            },
            Err(e @ (UpstreamError::Transport(_) | UpstreamError::Timeout(_))) => Round::Failed {
                retry_after: None,
                reason: e.to_string(),
            },
        }
    }

    /// Stores the job GitLab gave us and offers it to the pool. The job request that gets it
    /// answers only once the store is flushed; a job nobody waits for is flushed here, then
    /// acknowledged to GitLab by the maintenance loop.
    async fn take(&self, payload: &[u8]) -> Round {
        match self.jobs.accept(self.pool.name(), payload) {
            Ok(Accepted::New(id)) => {
                self.pool.queue.offer(id);
                if let Err(e) = self.jobs.durable().await {
                    tracing::error!(job.id = %id, error = %e, "the store cannot flush; the job would not survive a crash");
                }
                Round::Job(id)
            }
            Ok(Accepted::Again(id)) => {
                self.reissued(id, payload).await;
                Round::Job(id)
            }
            Err(e) => {
                // GitLab sent something that is not a job; nothing can be run or reported.
                tracing::error!(error = %e, bytes = payload.len(), "GitLab answered 201 with an unusable job payload");
                Round::Failed {
                    retry_after: None,
                    reason: e.to_string(),
                }
            }
        }
    }
}

impl Intake {
    /// GitLab handed out a job we hold: it never saw the job's acceptance (two-phase commit
    /// requeues unacknowledged jobs).
    async fn reissued(&self, id: JobId, payload: &[u8]) {
        match self.jobs.reissued(id, payload) {
            Ok(Reissue::RunAgain) => {
                tracing::warn!(job.id = %id, "GitLab handed out again a job that had ended here; running it again");
                self.pool.queue.offer(id);
            }
            Ok(Reissue::Reacknowledge) => {
                tracing::warn!(job.id = %id, "GitLab handed out again a job we hold; it will be acknowledged again");
            }
            Err(e) => {
                tracing::error!(job.id = %id, error = %e, "cannot handle a job GitLab handed out again")
            }
        }
    }
}

/// The `info` sent before any sidecar of the pool has described itself: what every shell-executor
/// runner (the built-in sidecar, stock `gitlab-runner`) supports. Replaced by what the pool's
/// sidecars say as soon as one asks for a job.
fn default_info() -> serde_json::Value {
    const SHELL_RUNNER_FEATURES: &[&str] = &[
        "variables",
        "artifacts",
        "shared",
        "upload_multiple_artifacts",
        "upload_raw_artifacts",
        "refspecs",
        "masking",
        "raw_variables",
        "artifacts_exclude",
        "multi_build_steps",
        "trace_reset",
        "trace_checksum",
        "trace_size",
        "cancelable",
        "return_exit_code",
        "cancel_gracefully",
    ];
    let features: serde_json::Map<String, serde_json::Value> = SHELL_RUNNER_FEATURES
        .iter()
        .map(|f| ((*f).to_string(), serde_json::Value::Bool(true)))
        .collect();
    serde_json::json!({
        "name": "gitlab-runner-autoscaler",
        "version": env!("CARGO_PKG_VERSION"),
        "executor": "shell",
        "features": features,
    })
}
