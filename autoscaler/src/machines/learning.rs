//! What the pipeline forecast learned, kept in the store, so that a restart does not forget
//! every project's pipeline shape. The controller holds one per pool (`pipelines.rs` feeds it).

use crate::core::Millis;
use crate::core::pipelines::{PipelineTracker, StagedJob};
use crate::store::Store;

/// Shortest time between two saves of what was learned: a crash loses at most this much of
/// it, and a busy pool writes one small record a minute rather than one per job.
const SAVE_EVERY: Millis = 60_000;

/// The pipeline forecast of one pool, with its bookkeeping for the store.
#[derive(Debug, Default)]
pub struct PipelineLearning {
    pub tracker: PipelineTracker,
    /// Learned something since the last save.
    changed: bool,
    saved_at: Option<Millis>,
}

fn meta_key(pool: &str) -> String {
    format!("pipelines/{pool}")
}

impl PipelineLearning {
    /// What the store kept for `pool`; nothing (learned afresh) when it kept nothing or what
    /// it kept cannot be read, which costs forecasts until pipelines are seen again and is
    /// said once.
    pub fn load(store: &dyn Store, pool: &str) -> Self {
        let tracker = match store.meta(&meta_key(pool)) {
            Ok(None) => PipelineTracker::default(),
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(pool, error = %e, "the pipeline shapes in the store cannot be read; learning them afresh");
                PipelineTracker::default()
            }),
            Err(e) => {
                tracing::warn!(pool, error = %e, "the pipeline shapes cannot be read from the store; learning them afresh");
                PipelineTracker::default()
            }
        };
        Self {
            tracker,
            changed: false,
            saved_at: None,
        }
    }

    pub fn job_started(&mut self, job: StagedJob<'_>, at: Millis) {
        self.tracker.job_started(job, at);
        self.changed = true;
    }

    pub fn job_arrived(&mut self, job: StagedJob<'_>, at: Millis) {
        self.tracker.job_arrived(job, at);
    }

    pub fn job_ended(&mut self, job: StagedJob<'_>, at: Millis) {
        self.tracker.job_ended(job, at);
        self.changed = true;
    }

    /// `job` ended as failed or canceled: its pipeline's later stages are not forecast.
    pub fn job_failed(&mut self, job: StagedJob<'_>, at: Millis) {
        self.tracker.job_failed(job, at);
        self.changed = true;
    }

    /// What the look-ahead read from GitLab of a pipeline's stages to come.
    pub fn announce(
        &mut self,
        project: &str,
        pipeline: u64,
        stages: Vec<(String, u32)>,
        at: Millis,
    ) {
        self.tracker.announce(project, pipeline, stages, at);
        self.changed = true;
    }

    /// What the look-ahead read from GitLab of a project's pipeline schedules.
    pub fn schedules_listed(&mut self, project: &str, next_runs: Vec<Millis>, at: Millis) {
        self.tracker.schedules_listed(project, next_runs, at);
        self.changed = true;
    }

    /// Writes what was learned when it changed and the last save is `SAVE_EVERY` old (or
    /// `force`, at shutdown). A refused write is retried at the next pass that is due.
    pub fn save(&mut self, store: &dyn Store, pool: &str, now: Millis, force: bool) {
        let due = self
            .saved_at
            .is_none_or(|at| now.saturating_sub(at) >= SAVE_EVERY);
        if !self.changed || !(due || force) {
            return;
        }
        let written = serde_json::to_vec(&self.tracker)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                store
                    .put_meta(&meta_key(pool), &bytes)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(()) => self.changed = false,
            Err(e) => tracing::debug!(pool, error = %e, "pipeline shapes not saved; retried later"),
        }
        self.saved_at = Some(now);
    }
}
