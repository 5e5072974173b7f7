//! Hand-out of a pool's jobs to the job requests its sidecars hold open.
//!
//! Each sidecar's `POST /jobs/request` becomes a waiter here. A job offered to the pool goes to
//! the waiter still connected whose machine suits it best (`core::routing`: the machine that
//! last ran the same project, else the busiest, else the oldest request), or waits in `ready`
//! for the next request. The number of
//! waiters not matched by a ready job is the pool's demand, which the intake turns into job
//! requests to GitLab (preemptive intake: we ask GitLab only for jobs someone is waiting for).
//!
//! A job is marked handed out (`Assigned`) *before* it is sent to the waiter, so that a job can
//! never be in flight to a request without the store knowing; if delivery then fails, the job is
//! offered again at once, and if the answer is lost on the wire, the acknowledgement window of
//! the pool brings it back.

mod waiter;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::core::job::{JobEvent, JobPhase};
use crate::core::routing::{self, Fit, Placement};
use crate::core::{JobId, SidecarId};
use crate::jobs::Jobs;
use waiter::WaiterGuard;

/// Decides whether a sidecar may be given a job now (a machine that is draining, used up or
/// full may not), and learns of each hand-out.
pub trait SlotGate: Send + Sync + std::fmt::Debug {
    fn may_take(&self, sidecar: SidecarId) -> bool;
    fn taken(&self, sidecar: SidecarId, job: JobId);
    /// What routing (`core::routing`) needs to know of each of `sidecars`' machines, in the
    /// same order. Asked for all candidates at once, so that the gate counts jobs once.
    fn placements(&self, sidecars: &[SidecarId]) -> Vec<Placement> {
        vec![Placement::default(); sidecars.len()]
    }
}

#[derive(Debug)]
pub struct PoolQueue {
    pool: String,
    jobs: Arc<Jobs>,
    state: Mutex<QueueState>,
    changed: watch::Sender<u64>,
    gate: std::sync::OnceLock<Arc<dyn SlotGate>>,
    /// Free slots the policy in force keeps ready (`u32::MAX` until a controller says), so
    /// that a preemptive pool whose period wants none still takes jobs.
    idle_target: std::sync::atomic::AtomicU32,
}

#[derive(Debug)]
struct QueueState {
    waiters: VecDeque<Waiter>,
    ready: VecDeque<JobId>,
    next_waiter: u64,
    /// `X-Request-Id` of a job request that was answered with a job → (sidecar, job). A retry of
    /// that request (the runner's HTTP-level retry reuses the id) gets the same job again.
    replays: HashMap<String, (SidecarId, JobId)>,
    handing_out: bool,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    sidecar: SidecarId,
    request_id: Option<String>,
    tx: oneshot::Sender<JobId>,
}

impl PoolQueue {
    pub fn new(pool: &str, jobs: Arc<Jobs>) -> Arc<Self> {
        Arc::new(Self {
            pool: pool.to_string(),
            jobs,
            state: Mutex::new(QueueState {
                waiters: VecDeque::new(),
                ready: VecDeque::new(),
                next_waiter: 0,
                replays: HashMap::new(),
                handing_out: true,
            }),
            changed: watch::Sender::new(0),
            gate: std::sync::OnceLock::new(),
            idle_target: std::sync::atomic::AtomicU32::new(u32::MAX),
        })
    }

    /// Installs the pool's slot gate (pools with machines). Set once.
    pub fn set_gate(&self, gate: Arc<dyn SlotGate>) {
        let _ = self.gate.set(gate);
    }

    fn may_take(&self, sidecar: SidecarId) -> bool {
        self.gate.get().is_none_or(|g| g.may_take(sidecar))
    }

    fn taken(&self, sidecar: SidecarId, job: JobId) {
        if let Some(g) = self.gate.get() {
            g.taken(sidecar, job);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Wakes whoever follows the queue (the intake), e.g. after the pool was resumed.
    pub fn poke(&self) {
        self.notify();
    }

    /// The idle target of the policy in force (set by the pool's controller each pass).
    pub fn set_idle_target(&self, slots: u32) {
        self.idle_target
            .store(slots, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn idle_target(&self) -> u32 {
        self.idle_target.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Woken whenever waiters or ready jobs change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waiting requests not matched by a ready job: how many jobs the pool could start now.
    pub fn demand(&self) -> usize {
        let s = self.lock();
        if !s.handing_out {
            return 0;
        }
        s.waiters.len().saturating_sub(s.ready.len())
    }

    pub fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }

    /// A job request of this sidecar is held open right now (so it is alive).
    pub fn has_waiter(&self, sidecar: SidecarId) -> bool {
        self.lock().waiters.iter().any(|w| w.sidecar == sidecar)
    }

    /// Offers a queued job to the pool: to the waiting request that suits it best
    /// (`core::routing`), or to `ready` for the next request. `true` when a waiting request
    /// took it: that request makes the hand-out durable before it answers (see
    /// `mirror::job_request`).
    pub fn offer(&self, job: JobId) -> bool {
        let mut s = self.lock();
        if s.handing_out {
            // Waiters whose request is gone or whose machine stopped taking jobs meanwhile are
            // answered "no job".
            s.waiters
                .retain(|w| !w.tx.is_closed() && self.may_take(w.sidecar));
            let project = self.jobs.project_of(job);
            let class = self.jobs.class_of(job);
            while let Some(w) = self.take_best_waiter(&mut s, project, class.as_deref()) {
                if let Err(e) = self
                    .jobs
                    .apply(job, JobEvent::HandedOut { sidecar: w.sidecar })
                {
                    // The job is no longer waiting (accepted by a sidecar or ended meanwhile).
                    tracing::debug!(job.id = %job, error = %e, "not offering a job that left the queue");
                    s.waiters.push_front(w);
                    return false;
                }
                let (sidecar, request_id) = (w.sidecar, w.request_id.clone());
                match w.tx.send(job) {
                    Ok(()) => {
                        if let Some(r) = request_id {
                            s.replays.insert(r, (sidecar, job));
                        }
                        self.taken(sidecar, job);
                        tracing::debug!(job.id = %job, sidecar.id = %sidecar, pool = %self.pool, "job handed out");
                        drop(s);
                        self.notify();
                        return true;
                    }
                    Err(_) => {
                        let _ = self.jobs.apply(job, JobEvent::HandOutFailed);
                    }
                }
            }
        }
        s.ready.push_back(job);
        drop(s);
        self.notify();
        false
    }

    fn placements(&self, sidecars: &[SidecarId]) -> Vec<Placement> {
        match self.gate.get() {
            Some(g) => g.placements(sidecars),
            None => vec![Placement::default(); sidecars.len()],
        }
    }

    /// Removes and returns the waiter best suited to a job of `project`.
    fn take_best_waiter(
        &self,
        s: &mut QueueState,
        project: Option<u64>,
        class: Option<&str>,
    ) -> Option<Waiter> {
        let sidecars: Vec<SidecarId> = s.waiters.iter().map(|w| w.sidecar).collect();
        let fits: Vec<Option<Fit>> = self
            .placements(&sidecars)
            .iter()
            .map(|p| Fit::of(p, project, class))
            .collect();
        s.waiters.remove(routing::best(&fits)?)
    }

    /// Removes and returns the ready job that suits `sidecar` best (of its machine's last
    /// project if one is ready, else the oldest).
    fn take_ready_for(&self, s: &mut QueueState, sidecar: SidecarId) -> Option<JobId> {
        if s.ready.is_empty() {
            return None;
        }
        let machine = Placement {
            running: 0,
            ..self.placements(&[sidecar]).swap_remove(0)
        };
        let fits: Vec<Option<Fit>> = s
            .ready
            .iter()
            .map(|job| {
                let class = self.jobs.class_of(*job);
                Fit::of(&machine, self.jobs.project_of(*job), class.as_deref())
            })
            .collect();
        s.ready.remove(routing::best(&fits)?)
    }

    /// Takes the next ready job for `sidecar` at once, or holds the request until a job is offered
    /// or `timeout` passes. `None` means "no job" (`204`).
    pub async fn wait_for_job(
        self: &Arc<Self>,
        sidecar: SidecarId,
        request_id: Option<String>,
        timeout: Duration,
    ) -> Option<JobId> {
        if !self.may_take(sidecar) {
            // Held like any request without a job, so that the sidecar does not spin.
            tokio::time::sleep(timeout).await;
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let waiter_id = {
            let mut s = self.lock();
            if !s.handing_out {
                return None;
            }
            while let Some(job) = self.take_ready_for(&mut s, sidecar) {
                if self
                    .jobs
                    .apply(job, JobEvent::HandedOut { sidecar })
                    .is_ok()
                {
                    if let Some(r) = request_id {
                        s.replays.insert(r, (sidecar, job));
                    }
                    drop(s);
                    self.taken(sidecar, job);
                    self.notify();
                    return Some(job);
                }
            }
            let id = s.next_waiter;
            s.next_waiter += 1;
            s.waiters.push_back(Waiter {
                id,
                sidecar,
                request_id,
                tx,
            });
            id
        };
        self.notify();
        let mut guard = WaiterGuard {
            queue: self.clone(),
            waiter_id,
            rx: Some(rx),
        };
        let rx = guard.rx.as_mut()?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(job)) => {
                guard.rx = None;
                Some(job)
            }
            Ok(Err(_)) => {
                guard.rx = None;
                None
            }
            Err(_elapsed) => guard.give_up(),
        }
    }

    /// The job a retried request (same `X-Request-Id`) was already given, if that hand-out still
    /// stands.
    pub fn replay(&self, sidecar: SidecarId, request_id: &str) -> Option<JobId> {
        let mut s = self.lock();
        let &(owner, job) = s.replays.get(request_id)?;
        let still_handed_out = matches!(self.jobs.phase(job), Some(JobPhase::Assigned { sidecar: to, .. }) if to == owner);
        if !still_handed_out {
            s.replays.remove(request_id);
            return None;
        }
        // Another sidecar presenting the same id gets nothing: ids are not credentials.
        (owner == sidecar).then_some(job)
    }

    /// Forgets replay entries whose job is no longer waiting for acceptance.
    pub fn prune_replays(&self) {
        let mut s = self.lock();
        s.replays
            .retain(|_, (_, job)| matches!(self.jobs.phase(*job), Some(JobPhase::Assigned { .. })));
    }

    /// Puts a job whose hand-out was never acknowledged back in the queue.
    pub fn requeue_unacknowledged(&self, job: JobId) {
        match self.jobs.apply(job, JobEvent::AckTimedOut) {
            Ok((JobPhase::Assigned { sidecar, .. }, JobPhase::Queued)) => {
                tracing::warn!(job.id = %job, sidecar.id = %sidecar, pool = %self.pool,
                    "job was handed out but never accepted; offering it again");
                self.offer(job);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(job.id = %job, error = %e, "requeue skipped"),
        }
    }

    /// Stops handing out jobs (shutdown): every held request is answered `204` now, later ones at
    /// once. Jobs stay queued in the store for the next start.
    pub fn stop_handing_out(&self) {
        let mut s = self.lock();
        s.handing_out = false;
        s.waiters.clear();
        drop(s);
        self.notify();
    }
}

#[cfg(test)]
mod tests;
