//! The upstream poller of one pool: asks GitLab for jobs while the pool's sidecars wait for one.
//!
//! Up to `request_concurrency` requests are in flight, never more than the pool's demand
//! (preemptive intake). A request in flight is never cancelled on purpose: GitLab may already
//! have assigned a job to it, and dropping the connection would strand that job. Jobs that
//! arrive when nobody waits any more are queued for the next request.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{self, UpstreamConfig};
use crate::core::JobId;
use crate::core::backoff::Backoff;
use crate::jobs::{Accepted, Jobs};
use crate::pools::Pool;
use crate::sidecars::Sidecars;
use crate::upstream::{JobRequest, JobRequestOutcome, Upstream, UpstreamError};

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;

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
    /// GitLab refuses the pool (`403`, `422 Runner is orphaned`).
    Forbidden {
        reason: String,
    },
    /// `409`: ask again at once, as a runner does.
    Conflict,
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
            let mut not_before = crate::clock::monotonic();
            let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
            let mut failing = false;
            let mut told_stopping = false;
            loop {
                let want = self.want();
                while !stop.is_cancelled() && in_flight.len() < want && crate::clock::monotonic() >= not_before {
                    let this = self.clone();
                    in_flight.spawn(async move { this.one_request().await }.in_current_span());
                }
                if stop.is_cancelled() && in_flight.is_empty() {
                    break;
                }
                if stop.is_cancelled() && !told_stopping {
                    told_stopping = true;
                    // A request GitLab holds may be given a job at any moment, so it is not
                    // cut: shutting down waits for it, up to GitLab's long-poll time.
                    tracing::info!(requests = in_flight.len(),
                        "stopping: waiting for the job requests GitLab holds to come back (up to its long-poll time)");
                }
                let backing_off = in_flight.len() < want && crate::clock::monotonic() < not_before;
                tokio::select! {
                    () = stop.cancelled(), if !stop.is_cancelled() => {}
                    Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                        let round = match done {
                            Ok(round) => round,
                            Err(e) => Round::Failed { retry_after: None, reason: format!("request task failed: {e}") },
                        };
                        let pause = self.pace(round, &mut backoff, &mut failing);
                        not_before = not_before.max(crate::clock::monotonic() + pause);
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
            if self.pool.set_upstream_refusal(None) {
                tracing::info!("GitLab takes this pool's job requests again; the pool resumes");
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
            Round::Conflict => {
                recovered(failing);
                Duration::ZERO
            }
            Round::Forbidden { reason } => {
                let wait = backoff.fail(Some(Duration::from_secs(60)), rand::random::<f64>());
                *failing = true;
                if self.pool.set_upstream_refusal(Some(reason.clone())) {
                    tracing::error!(%reason, retry_in = ?wait,
                        "GitLab refuses this pool's job requests (token not valid, or the runner is orphaned: \
                         no project or group left); the pool is paused and takes no jobs; check upstream_token in GitLab");
                }
                wait
            }
        }
    }

    /// How many job requests should be in flight now.
    fn want(&self) -> usize {
        if self.pool.paused_by_operator() {
            return 0;
        }
        let limit = self.pool.config.request_concurrency as usize;
        // A preemptive pool whose period keeps no idle slot would never have a sidecar waiting,
        // so it takes jobs on demand meanwhile: a period change never stops intake.
        let policy = self.pool.policy();
        let mode = match self.pool.intake() {
            config::Intake::Preemptive if self.pool.queue.idle_target() == 0 => {
                config::Intake::OnDemand
            }
            mode => mode,
        };
        // As many jobs as the pool could run at once; machines are made for them.
        let room = || {
            let s = &policy.scaling;
            let capacity = s.max_machines as usize * s.capacity_per_machine as usize;
            capacity.saturating_sub(self.jobs.active_in_pool(self.pool.name()))
        };
        let wanted = match mode {
            config::Intake::Preemptive => self.pool.queue.demand(),
            config::Intake::OnDemand => room(),
            config::Intake::Hybrid => {
                let ahead = policy.scaling.hybrid_ahead as usize;
                let waiting = self.jobs.waiting_in_pool(self.pool.name()).len();
                (self.pool.queue.demand() + ahead.saturating_sub(waiting)).min(room())
            }
        };
        wanted.min(limit)
    }

    async fn one_request(&self) -> Round {
        if !self.jobs.store_writable().await {
            return Round::Failed {
                retry_after: None,
                // The store's error itself is logged once per episode (`Jobs`); this only says
                // why the intake waits.
                reason: "paused until the store takes writes again".into(),
            };
        }
        let mut info = presented_info(&self.sidecars, &self.pool);
        if let Some(features) = info
            .get_mut("features")
            .and_then(serde_json::Value::as_object_mut)
        {
            // Where GitLab offers two-phase commit, a job waiting for a machine stays pending
            // there, kept with `pending` keep-alives, until a sidecar accepts it; a job no
            // machine can take is released by ceasing them (runner-protocol.md §3.5). Where
            // GitLab does not, the job runs at hand-out and this changes nothing.
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
            Ok(JobRequestOutcome::Forbidden { reason }) => Round::Forbidden { reason },
            Ok(JobRequestOutcome::Conflict) => Round::Conflict,
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
    /// makes it durable before it answers (one sync covers the acceptance and the hand-out); a
    /// job nobody waits for is made durable here, then acknowledged to GitLab by the
    /// maintenance loop. A job that cannot be made durable is given back.
    async fn take(&self, payload: &[u8]) -> Round {
        match self.jobs.accept(self.pool.name(), payload) {
            Ok(Accepted::New(id)) => {
                if self.pool.queue.offer(id) {
                    // The request that took it makes it durable before answering, on its own
                    // task: no hand-off between two tasks on the way to the sidecar.
                    return Round::Job(id);
                }
                if let Err(e) = self.jobs.durable().await {
                    self.jobs.give_back_unstored(id, &e);
                    return Round::Failed {
                        retry_after: None,
                        reason: format!(
                            "job {id} could not be made durable; it goes back to GitLab as a failure"
                        ),
                    };
                }
                Round::Job(id)
            }
            Ok(Accepted::Unstored(id)) => Round::Failed {
                retry_after: None,
                reason: format!(
                    "job {id} could not be stored; it goes back to GitLab as a failure"
                ),
            },
            Ok(Accepted::Refused(id)) => {
                if let Err(e) = self.jobs.durable().await {
                    tracing::error!(job.id = %id, error = %e, "the store cannot flush; the job would not survive a crash");
                }
                Round::Job(id)
            }
            Ok(Accepted::Again(id)) => {
                tracing::warn!(job.id = %id, "GitLab answered with a job we already hold; ignored");
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

/// The `info` the pool presents to GitLab (job requests, and the token's verify at start-up):
/// what its sidecars say, or before any has, what the runner it starts would.
pub(crate) fn presented_info(sidecars: &Sidecars, pool: &Pool) -> serde_json::Value {
    sidecars
        .pool_info(pool.name())
        .unwrap_or_else(|| configured_info(pool.config.sidecar.as_ref().map(|s| &s.mode)))
}

/// The `info` sent before any sidecar of the pool has described itself: the features of the
/// runner the pool is configured to start (`core::features::configured_features`), so that
/// GitLab drops no job that runner could run. Replaced by what the pool's sidecars say as soon
/// as one asks for a job.
/// A pool without a sidecar configuration (its runners register themselves) and a `command`
/// pool are taken to run a stock shell runner.
fn configured_info(sidecar: Option<&config::SidecarMode>) -> serde_json::Value {
    use crate::core::features::{ConfiguredRunner, configured_features};
    let runner = match sidecar {
        Some(config::SidecarMode::Builtin) => ConfiguredRunner::Builtin,
        Some(config::SidecarMode::GitlabRunner { executor, .. }) => {
            ConfiguredRunner::Stock { executor }
        }
        Some(config::SidecarMode::Command { .. }) | None => {
            ConfiguredRunner::Stock { executor: "shell" }
        }
    };
    let executor = match runner {
        ConfiguredRunner::Stock { executor } => executor,
        ConfiguredRunner::Builtin => "shell",
    };
    serde_json::json!({
        "name": "gitlab-runner-autoscaler",
        "version": env!("CARGO_PKG_VERSION"),
        "executor": executor,
        "features": configured_features(runner),
    })
}
