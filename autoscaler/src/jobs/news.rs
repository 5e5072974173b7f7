//! What happened to each pool's jobs since its controller last looked, in order: the facts its
//! forecasts learn from. Arrivals, and how long each job waited for its first hand-out, feed
//! the demand forecast (`core::demand`); the starts and ends of jobs that say where they sit
//! in a pipeline feed the pipeline forecast (`core::pipelines`).

use std::collections::VecDeque;

use super::Jobs;
use super::timeline::HANDED_OVER;
use crate::core::Millis;
use crate::core::demand::Arrival;
use crate::core::job::JobPhase;
use crate::core::pipelines::{PipelinePlace, StagedJob};
use crate::store::JobRecord;

/// News kept for a pool whose controller does not take them (a static pool): the oldest go.
const NEWS_KEPT: usize = 10_000;

/// A job of a known project and place in its pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineJob {
    /// `job_info.project_id`, as the tracker names projects.
    pub project: String,
    pub place: PipelinePlace,
    /// The machine class it routed to (`None`: the pool has no classes).
    pub class: Option<String>,
}

impl PipelineJob {
    fn of(record: &JobRecord) -> Option<Self> {
        Some(Self {
            project: record.project_id?.to_string(),
            place: record.pipeline.clone()?,
            class: record.class.clone(),
        })
    }

    pub fn staged(&self) -> StagedJob<'_> {
        self.place.staged(&self.project, self.class.as_deref())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNews {
    /// GitLab handed the pool a job it can run.
    Arrived {
        arrival: Arrival,
        /// The machine class the job routes to (`None`: the pool has no classes): only that
        /// class's demand counts it.
        class: Option<String>,
        pipeline: Option<PipelineJob>,
    },
    /// The job was handed to a sidecar for the first time, `waited` after it came.
    HandedOut {
        waited: Millis,
        /// The machine class it routed to (`None`: the pool has no classes).
        class: Option<String>,
    },
    /// A sidecar started the job (its first call for it).
    Started { at: Millis, pipeline: PipelineJob },
    /// The job stopped running: it ended, or its machine was lost. `failed`: as failed or
    /// canceled ([`crate::store::JobRecord::failed`]), so its pipeline's later stages will not
    /// come.
    Ended {
        at: Millis,
        pipeline: PipelineJob,
        failed: bool,
    },
    /// The pool released the job to GitLab, held for its acknowledgement, because no machine
    /// took it within `acquire_timeout`: GitLab fails it and may queue a retry.
    Released {
        at: Millis,
        /// The machine class it routed to (`None`: the pool has no classes).
        class: Option<String>,
    },
}

impl JobNews {
    /// The news a phase change of `record` makes, if any: starting is entering `Running`,
    /// ending is leaving it (a job never goes back to the queue from there).
    pub(super) fn of_change(
        record: &JobRecord,
        before: &JobPhase,
        after: &JobPhase,
        at: Millis,
    ) -> Option<Self> {
        let was = matches!(before, JobPhase::Running { .. });
        let is = matches!(after, JobPhase::Running { .. });
        let pipeline = PipelineJob::of(record).filter(|_| was != is)?;
        Some(if is {
            Self::Started { at, pipeline }
        } else {
            Self::Ended {
                at,
                pipeline,
                failed: record.failed,
            }
        })
    }

    /// The news of a hand-out of `record` at `at`, if it is its first: a job handed out again
    /// (its sidecar went away before starting it) waited for that sidecar, not for a slot.
    pub(super) fn of_hand_out(
        record: &JobRecord,
        before: &JobPhase,
        after: &JobPhase,
        at: Millis,
    ) -> Option<Self> {
        let first = matches!(before, JobPhase::Queued)
            && matches!(after, JobPhase::Assigned { .. })
            && !record.timeline.iter().any(|s| s.step == HANDED_OVER);
        first.then(|| Self::HandedOut {
            waited: at.saturating_sub(record.accepted_at),
            class: record.class.clone(),
        })
    }

    pub(super) fn arrived(record: &JobRecord, queue_size: Option<u32>) -> Self {
        Self::Arrived {
            arrival: Arrival {
                at: record.accepted_at,
                queue_size,
            },
            class: record.class.clone(),
            pipeline: PipelineJob::of(record),
        }
    }
}

impl Jobs {
    pub(super) fn record_news(&self, pool: &str, news: JobNews) {
        let mut all = self
            .news
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = all.entry(pool.to_string()).or_default();
        if list.len() == NEWS_KEPT {
            list.pop_front();
        }
        list.push_back(news);
    }

    /// `id` ends as failed or canceled: its end's news says so ([`JobNews::Ended`]). Called
    /// before the job's end is applied.
    pub fn ends_failed(&self, id: crate::core::JobId) -> Result<(), super::JobsError> {
        if self.get(id).is_none_or(|r| r.failed) {
            return Ok(());
        }
        self.update(id, |r| r.failed = true)
    }

    /// `id` was released to GitLab for want of a machine (see [`JobNews::Released`]).
    pub fn released_to_gitlab(&self, pool: &str, id: crate::core::JobId) {
        let class = self.get(id).and_then(|r| r.class);
        let at = self.clock.now();
        self.record_news(pool, JobNews::Released { at, class });
    }

    /// What happened to `pool`'s jobs since the last call, oldest first (for its forecasts).
    pub fn take_news(&self, pool: &str) -> VecDeque<JobNews> {
        self.news
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(pool)
            .unwrap_or_default()
    }
}
