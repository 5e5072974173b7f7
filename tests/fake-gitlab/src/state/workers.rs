//! GitLab's background workers that change jobs without a request: the retry worker for
//! unacknowledged two-phase jobs and the sweep that fails jobs running past their timeout.

use std::time::{Duration, Instant};

use crate::control::JobStatus;

use super::{Rules, State};

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

impl State {
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
        // A retry stays in its pipeline, on the same commit (`Ci::RetryJobService` clones the
        // job into its pipeline), whatever the spec left to the fake to choose.
        let retry = (job.retry_count < self.rules.provisioning_retries).then(|| {
            let mut spec = job.spec.clone();
            spec.pipeline_id = Some(job.pipeline_id);
            spec.sha = Some(job.sha.clone());
            (spec, job.retry_count + 1)
        });
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
}
