//! What GitLab's REST API tells a reader with an API token about past jobs: the jobs'
//! wall-clock times, stamped as their states change, and which jobs reached a runner
//! (`GET /api/v4/runners/:id/jobs`). The entities are rendered in `entities`.

use std::time::SystemTime;

use super::State;
use super::api_tokens::ApiRefusal;

/// When a job was created, became pending (a later stage's job waits `created` first: GitLab's
/// `queued_at`), started running and finished, as GitLab records them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobTimes {
    pub(super) created: SystemTime,
    pub(super) queued: Option<SystemTime>,
    pub(super) started: Option<SystemTime>,
    pub(super) finished: Option<SystemTime>,
}

impl JobTimes {
    /// Every time recorded, for a pipeline's `updated_at`.
    pub(super) fn stamps(&self) -> impl Iterator<Item = SystemTime> {
        [Some(self.created), self.queued, self.started, self.finished]
            .into_iter()
            .flatten()
    }
}

impl State {
    /// Stamps the times of the jobs whose state changed: created when enqueued, queued when
    /// made pending, started when first seen running, finished when first seen final.
    pub fn stamp_times(&mut self, now: SystemTime) {
        for id in self.fresh.drain(..) {
            self.times.insert(
                id,
                JobTimes {
                    created: now,
                    queued: None,
                    started: None,
                    finished: None,
                },
            );
        }
        for id in self.newly_pending.drain(..) {
            if let Some(times) = self.times.get_mut(&id) {
                times.queued = Some(now);
            }
        }
        let mut settled = Vec::new();
        for &id in &self.unsettled {
            let (Some(job), Some(times)) = (self.jobs.get(&id), self.times.get_mut(&id)) else {
                settled.push(id);
                continue;
            };
            if job.running_since.is_some() && times.started.is_none() {
                times.started = Some(now);
            }
            if job.status.is_final() {
                times.finished = Some(now);
                settled.push(id);
            }
        }
        for id in settled {
            self.unsettled.remove(&id);
        }
    }

    /// The ids of the runner's jobs (`GET /runners/:id/jobs`): those that reached it, newest
    /// first; `404 Runner Not Found` for an unknown runner. The caller has authenticated the
    /// token.
    pub fn runner_job_ids(&self, runner_id: u64) -> Result<Vec<u64>, ApiRefusal> {
        let token = self
            .runners
            .iter()
            .find(|(_, r)| r.id == runner_id)
            .map(|(token, _)| token)
            .ok_or(ApiRefusal::RunnerNotFound)?;
        Ok(self
            .jobs
            .values()
            .rev()
            .filter(|job| &job.spec.runner_token == token && job.running_since.is_some())
            .map(|job| job.id)
            .collect())
    }
}
