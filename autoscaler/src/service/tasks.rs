//! The service's own background work: the maintenance loop (unacknowledged hand-outs requeued,
//! jobs that waited too long for a machine given up, owed calls delivered, finished jobs
//! collected) and the drain that shutdown waits on.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::core::job::JobEvent;
use crate::delivery::Delivery;
use crate::jobs::Jobs;
use crate::pools::Pool;

/// How long a sidecar has to acknowledge a job it was handed before the autoscaler does.
const ACK_GRACE_MS: u64 = 5_000;

/// Finished jobs are kept this long so that late calls for them get a coherent answer.
const FINISHED_RETENTION_MS: u64 = 10 * 60 * 1000;

const MAINTENANCE_TICK: Duration = Duration::from_secs(1);

/// Waits until no job is with a sidecar, `grace` has passed, or `immediate` fires.
pub(super) async fn drain(jobs: &Jobs, grace: Duration, immediate: &CancellationToken) {
    let deadline = crate::clock::monotonic() + grace;
    let mut changes = jobs.subscribe();
    loop {
        let remaining = jobs.with_sidecars();
        if remaining == 0 {
            return;
        }
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(jobs = remaining, "shutdown grace period over; jobs still running stay with their sidecars");
                return;
            }
            () = immediate.cancelled() => return,
        }
    }
}

/// Periodic upkeep: hand-outs never acknowledged go back to the queue, replay entries and
/// finished jobs are collected.
pub(super) async fn maintenance(
    pools: Vec<Arc<Pool>>,
    jobs: Arc<Jobs>,
    delivery: Arc<Delivery>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(MAINTENANCE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        ticks += 1;
        for pool in &pools {
            let window = millis(pool.config.assign_ack_timeout);
            for id in jobs.unacknowledged(pool.name(), window) {
                pool.queue.requeue_unacknowledged(id);
            }
            pool.queue.prune_replays();
            if pool.config.provisioner.is_some() {
                let timeout = millis(pool.policy().scaling.acquire_timeout);
                for id in jobs.waited_too_long(pool.name(), timeout) {
                    give_up(&jobs, pool.name(), id, timeout);
                }
            }
        }
        delivery.deliver_owed(ACK_GRACE_MS).await;
        if ticks.is_multiple_of(60) {
            match jobs.collect_finished(FINISHED_RETENTION_MS) {
                Ok(0) => {}
                Ok(n) => tracing::debug!(jobs = n, "finished jobs collected"),
                Err(e) => tracing::error!(error = %e, "could not collect finished jobs"),
            }
        }
    }
}

/// A job no machine took within `acquire_timeout`. Held by GitLab for our acknowledgement, it
/// is released by ceasing keep-alives: GitLab fails it as `runner_provisioning_timeout` and
/// its retry rules give it to another runner. Else GitLab runs it already, and it is failed
/// there with `runner_system_failure` (which CI `retry:` can rerun).
fn give_up(jobs: &Jobs, pool: &str, id: crate::core::JobId, timeout: u64) {
    let held = jobs.get(id).is_some_and(|r| r.held && !r.acknowledged);
    let reason = format!(
        "no machine took it within {} s (acquire_timeout)",
        timeout / 1000
    );
    let result = if held {
        tracing::warn!(job.id = %id, %pool, %reason,
            "releasing the job to GitLab: no more keep-alives, so GitLab fails it as runner_provisioning_timeout and may retry it elsewhere");
        jobs.released_to_gitlab(pool, id);
        jobs.apply(id, JobEvent::Ended)
    } else {
        tracing::warn!(job.id = %id, %pool, %reason, "giving up on a job");
        jobs.apply(id, JobEvent::Abandon { reason })
    };
    if let Err(e) = result {
        tracing::error!(job.id = %id, error = %e, "cannot give up on the job");
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
