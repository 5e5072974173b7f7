//! The jobs the autoscaler holds: their phase (see `core::job`), mirrored in the store, and the
//! checks that decide whether a relayed call may reach GitLab.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::clock::Clock;
use crate::core::job::{InvalidTransition, JobEvent, JobPhase, transition};
use crate::core::payload::PayloadError;
use crate::core::{JobId, Millis};
use crate::store::{JobRecord, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    #[error("job {0} is not held by the autoscaler")]
    Unknown(JobId),
}

/// Why a relayed call was refused. Both are answered without calling GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("job {0} is not held by the autoscaler")]
    UnknownJob(JobId),
    #[error("the job token does not open job {0}")]
    WrongToken(JobId),
    #[error("job {0} was failed by the autoscaler: its machine left service")]
    GivenUp(JobId),
}

/// The outcome of taking a job from GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// A new job, queued.
    New(JobId),
    /// The job could not be stored (a full or failing disk): it is not run, and GitLab gets it
    /// back as a failure it can retry (see [`Jobs::accept`]).
    Unstored(JobId),
    /// The job asks for a machine class the pool does not have: stored, not run, failed at
    /// GitLab with a line in its log naming the classes there are.
    Refused(JobId),
    /// GitLab handed us a job we already hold. GitLab never hands a job out twice
    /// (runner-protocol.md §3.5); this is a replayed answer, and nothing changed.
    Again(JobId),
}

#[derive(Debug, Clone)]
struct Held {
    record: JobRecord,
    /// The trace length GitLab last confirmed (`Range: 0-<n>`), when known. Lets the relay answer
    /// a patch at the wrong offset with `416` without a round trip.
    trace_length: Option<u64>,
    /// The payload of a job taken in this run, until a sidecar has it: the hand-out reads no
    /// store, and works while the store refuses even reads (sled after a write error).
    payload: Option<Bytes>,
    /// A running job found in the store at start-up, not yet confirmed with GitLab. After a
    /// crash the store can be a little behind: the job's sidecar may have finished it, and
    /// GitLab heard the end, while the record still says running. Left so, it would hold its
    /// machine busy for ever; one keep-alive settles it (`owing`).
    unconfirmed: bool,
}

#[derive(Debug)]
pub struct Jobs {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Boxed: a job's entry is a few hundred bytes, and a map keeps up to half its slots empty
    /// (12.6 MiB inline for 20,000 jobs, 8 MiB boxed).
    held: Mutex<HashMap<JobId, Box<Held>>>,
    /// Bumped on every change of any job's phase, for whoever waits on job progress.
    changed: tokio::sync::watch::Sender<u64>,
    /// A job could not be stored; no more are taken until a write works again.
    store_failing: std::sync::atomic::AtomicBool,
    classes: class::PoolClasses,
    /// What happened to each pool's jobs, until the pool's controller takes it for its
    /// forecasts (`news`).
    news: Mutex<HashMap<String, VecDeque<news::JobNews>>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The waits of jobs started in the last hour (`GET /waits`).
    waits: waits::WaitRing,
}

impl Jobs {
    /// Loads the jobs the store holds (all phases, finished ones too until they are collected).
    pub fn load(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let held = store
            .jobs()?
            .into_iter()
            .map(|record| {
                (
                    record.id,
                    Box::new(Held {
                        unconfirmed: matches!(record.phase, JobPhase::Running { .. }),
                        record,
                        trace_length: None,
                        payload: None,
                    }),
                )
            })
            .collect();
        Ok(Self {
            store,
            clock,
            held: Mutex::new(held),
            changed: tokio::sync::watch::Sender::new(0),
            store_failing: std::sync::atomic::AtomicBool::new(false),
            classes: class::PoolClasses::default(),
            news: Mutex::default(),
            metrics: None,
            waits: waits::WaitRing::default(),
        })
    }

    /// Records each job's wait for a sidecar in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Woken whenever a job is added, changes phase or is collected.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Box<Held>>> {
        // Every critical section below leaves the map consistent before it can panic.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A job accepted a moment ago whose writes did not reach stable storage (`durable`
    /// failed): it must not run, so it is given back to GitLab as a failure, like a job the
    /// store refused (see [`Jobs::accept`]). A hand-out racing with this is answered "no job".
    pub fn give_back_unstored(&self, id: JobId, error: &StoreError) {
        self.store_refused(error);
        tracing::warn!(job.id = %id, "job not made durable: it is not run and goes back to GitLab as a failure");
        let reason = unstored_reason(error);
        if let Err(e) = self.apply(id, JobEvent::Abandon { reason }) {
            tracing::debug!(job.id = %id, error = %e, "job not given back");
        }
    }

    /// Notes that the store refused a write. The first refusal of an episode (until a probe
    /// write works again) is logged.
    fn store_refused(&self, error: &StoreError) {
        if !self
            .store_failing
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::error!(error = %error,
                "the store cannot write: no job is taken from GitLab until it can; jobs already \
                 with sidecars go on, their state kept in memory meanwhile");
        }
    }

    /// Whether the store takes writes: `true` unless a job could not be stored, then only once
    /// a probe write reaches stable storage again (so no job is taken from GitLab to be failed
    /// meanwhile).
    pub async fn store_writable(&self) -> bool {
        use std::sync::atomic::Ordering;
        if !self.store_failing.load(Ordering::SeqCst) {
            return true;
        }
        let works = self.store.put_meta("probe/writable", b"1").is_ok()
            && self.store.durable().await.is_ok();
        if works {
            self.store_failing.store(false, Ordering::SeqCst);
            tracing::info!("the store takes writes again; taking jobs again");
        }
        works
    }

    /// Resolves once everything written so far (acceptances, hand-outs) is on disk. Concurrent
    /// callers share one flush.
    pub async fn durable(&self) -> Result<(), StoreError> {
        self.store.durable().await
    }

    /// Changes a job's record (not its phase), persisted.
    pub(crate) fn update(
        &self,
        id: JobId,
        change: impl FnOnce(&mut JobRecord),
    ) -> Result<(), JobsError> {
        let mut held = self.lock();
        let job = held.get_mut(&id).ok_or(JobsError::Unknown(id))?;
        let mut record = job.record.clone();
        change(&mut record);
        if let Err(e) = self.store.put_job(&record) {
            // Kept in memory: a crash would lose the change, which a restart tolerates (it
            // owes GitLab the same again), and the job goes on meanwhile.
            self.store_refused(&e);
        }
        job.record = record;
        drop(held);
        self.bump();
        Ok(())
    }

    /// Applies `event` to job `id`, persisting the new phase (without waiting for the disk:
    /// losing a phase change in a crash only makes the job look younger, which the protocol
    /// tolerates, see `core::job`). Only a hand-out fails when the store refuses the write, and
    /// the job is then given back ([`Self::give_back_unstored`]).
    pub fn apply(&self, id: JobId, event: JobEvent) -> Result<(JobPhase, JobPhase), JobsError> {
        let now = self.clock.now();
        let mut held = self.lock();
        let job = held.get_mut(&id).ok_or(JobsError::Unknown(id))?;
        let before = job.record.phase.clone();
        let after = transition(&before, &event, now)?;
        if after != before {
            let mut record = job.record.clone();
            record.phase = after.clone();
            let handed_out = news::JobNews::of_hand_out(&record, &before, &after, now);
            if let Some(step) = timeline::phase_step(&before, &after, &event, now) {
                timeline::push(&mut record, step);
            }
            if let Err(e) = self.store.put_job(&record) {
                // A hand-out must be on disk before the job leaves: one the store refuses is
                // given back to GitLab here, as any job that cannot be made durable (the
                // caller has already taken it from the pool's queue). Any other phase change
                // is kept in memory when the store refuses it (as if lost in a crash, see
                // above), so that jobs with sidecars go on.
                if matches!(event, JobEvent::HandedOut { .. }) {
                    drop(held);
                    self.give_back_unstored(id, &e);
                    return Err(e.into());
                }
                self.store_refused(&e);
            }
            if !matches!(after, JobPhase::Queued | JobPhase::Assigned { .. }) {
                // A sidecar has it (or nobody will): the payload is not handed out again.
                job.payload = None;
            }
            if matches!(after, JobPhase::Running { .. }) {
                let waited = now.saturating_sub(record.accepted_at);
                self.waits
                    .record(&record.pool, id, now, record.queued_at_gitlab_ms, waited);
                if let Some(metrics) = &self.metrics {
                    metrics.job_waited(&record.pool, record.queued_at_gitlab_ms, waited);
                }
            }
            let news = news::JobNews::of_change(&record, &before, &after, now);
            let pool = record.pool.clone();
            job.record = record;
            drop(held);
            for news in [handed_out, news].into_iter().flatten() {
                self.record_news(&pool, news);
            }
            self.bump();
        }
        Ok((before, after))
    }

    pub fn phase(&self, id: JobId) -> Option<JobPhase> {
        self.lock().get(&id).map(|j| j.record.phase.clone())
    }

    pub fn get(&self, id: JobId) -> Option<JobRecord> {
        self.lock().get(&id).map(|j| j.record.clone())
    }

    /// The project a job belongs to, as GitLab's payload said.
    pub fn project_of(&self, id: JobId) -> Option<u64> {
        self.lock().get(&id).and_then(|j| j.record.project_id)
    }

    pub fn payload(&self, id: JobId) -> Result<Option<Bytes>, StoreError> {
        if let Some(kept) = self.lock().get(&id).and_then(|j| j.payload.clone()) {
            return Ok(Some(kept));
        }
        self.store.payload(id)
    }

    pub fn trace_length(&self, id: JobId) -> Option<u64> {
        self.lock().get(&id).and_then(|j| j.trace_length)
    }

    pub fn set_trace_length(&self, id: JobId, length: u64) {
        if let Some(j) = self.lock().get_mut(&id) {
            j.trace_length = Some(length);
        }
    }

    /// Drops jobs finished more than `retention` ago. Late calls for them are then answered
    /// `404`, which a runner treats like GitLab's answer for a job that is gone.
    pub fn collect_finished(&self, retention: Millis) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let done: Vec<JobId> = self
            .lock()
            .values()
            .filter(|j| matches!(j.record.phase, JobPhase::Finished { at } if now.saturating_sub(at) >= retention))
            .map(|j| j.record.id)
            .collect();
        for id in &done {
            self.store.remove_job(*id)?;
            self.lock().remove(id);
        }
        if !done.is_empty() {
            self.bump();
        }
        Ok(done.len())
    }
}

fn unstored_reason(error: &StoreError) -> String {
    format!("the autoscaler could not store the job ({error}), so it did not run it")
}

mod accept;
mod access;
mod class;
mod load;
mod news;
mod owed;
mod queries;
mod timeline;
mod waits;

pub use load::SidecarLoad;
pub use news::{JobNews, PipelineJob};
pub use waits::{RecentWaits, Wait};

#[cfg(test)]
mod tests;
