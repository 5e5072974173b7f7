//! A waiter's end: a job request that timed out or went away is removed from the queue, and a
//! job that reached it in that instant is offered again rather than lost.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::PoolQueue;
use crate::core::JobId;
use crate::core::job::JobEvent;
use crate::jobs::Jobs;

/// Removes a waiter whose request ended (timeout, or the connection went away and the handler
/// was dropped). A job that reached the waiter in that instant is not lost: it is taken back and
/// offered to the pool again.
pub(super) struct WaiterGuard {
    pub(super) queue: Arc<PoolQueue>,
    pub(super) waiter_id: u64,
    pub(super) rx: Option<oneshot::Receiver<JobId>>,
}

impl WaiterGuard {
    fn remove_waiter(&self) {
        let mut s = self.queue.lock();
        let before = s.waiters.len();
        s.waiters.retain(|w| w.id != self.waiter_id);
        let removed = s.waiters.len() != before;
        drop(s);
        if removed {
            self.queue.notify();
        }
    }

    /// Timeout: stop waiting, but deliver a job that arrived at the last moment.
    pub(super) fn give_up(&mut self) -> Option<JobId> {
        self.remove_waiter();
        self.rx.take()?.try_recv().ok()
    }
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        self.remove_waiter();
        if let Ok(job) = rx.try_recv() {
            tracing::debug!(job.id = %job, "job request went away as its job arrived; offering the job again");
            if self.queue.jobs.apply(job, JobEvent::HandOutFailed).is_ok() && !self.queue.offer(job)
            {
                // The request that would have made it durable is gone; nobody else will before
                // the job waits in the queue.
                make_durable(self.queue.jobs.clone(), job);
            }
        }
    }
}

/// Makes a job's acceptance durable in the background; a job that cannot be is given back.
fn make_durable(jobs: Arc<Jobs>, job: JobId) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(e) = jobs.durable().await {
                jobs.give_back_unstored(job, &e);
            }
        });
    }
}
