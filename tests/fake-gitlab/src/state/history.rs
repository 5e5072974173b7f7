//! What GitLab's REST API tells a reader with an API token about a runner's past jobs
//! (`GET /api/v4/runners/:id/jobs`): the jobs' wall-clock times, stamped as their states
//! change, and the tokens that may read them with their scopes.

use std::collections::BTreeSet;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::State;

/// When a job was created, became pending (a later stage's job waits `created` first: GitLab's
/// `queued_at`), started running and finished, as GitLab records them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobTimes {
    created: SystemTime,
    queued: Option<SystemTime>,
    started: Option<SystemTime>,
    finished: Option<SystemTime>,
}

/// Why an API call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApiRefusal {
    /// No such token (401).
    Unauthorized,
    /// The token lacks `read_api` and `api` (403 `insufficient_scope`).
    InsufficientScope,
    /// No runner with that id (404).
    RunnerNotFound,
}

impl State {
    /// Adds a personal, group or project access token with its scopes.
    pub fn add_api_token(&mut self, token: &str, scopes: &[String]) {
        self.api_tokens
            .insert(token.to_owned(), scopes.iter().cloned().collect());
    }

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

    /// The runner's jobs (`GET /runners/:id/jobs`, GitLab's `JobBasicWithProject`), newest
    /// first, or why the token may not see them.
    pub fn runner_jobs(&self, api_token: &str, runner_id: u64) -> Result<Vec<Value>, ApiRefusal> {
        let scopes: &BTreeSet<String> = self
            .api_tokens
            .get(api_token)
            .ok_or(ApiRefusal::Unauthorized)?;
        if !scopes.contains("read_api") && !scopes.contains("api") {
            return Err(ApiRefusal::InsufficientScope);
        }
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
            .map(|job| self.job_json(job.id))
            .collect())
    }

    fn job_json(&self, id: u64) -> Value {
        let job = &self.jobs[&id];
        let times = self.times.get(&id);
        let created = times.map(|t| t.created);
        let queued = times.and_then(|t| t.queued);
        let started = times.and_then(|t| t.started);
        let finished = times.and_then(|t| t.finished);
        let seconds = |from: Option<SystemTime>, to: Option<SystemTime>| match (from, to) {
            (Some(from), Some(to)) => to.duration_since(from).ok().map(|d| json!(d.as_secs_f64())),
            _ => None,
        };
        json!({
            "id": job.id,
            "status": job.status,
            "stage": job.spec.stage,
            "name": job.spec.name,
            "ref": job.spec.git_ref,
            "tag": false,
            "coverage": null,
            "allow_failure": false,
            "created_at": created.map(rfc3339),
            "started_at": started.map(rfc3339),
            "finished_at": finished.map(rfc3339),
            "erased_at": null,
            "duration": seconds(started, finished),
            // From pending to running, as GitLab's `queued_duration` (`started_at - queued_at`).
            "queued_duration": seconds(queued, started),
            "failure_reason": job.failure_reason,
            "pipeline": {
                "id": job.pipeline_id,
                "project_id": job.spec.project_id,
                "sha": job.sha,
                "ref": job.spec.git_ref,
                "status": job.status,
            },
            "project": {
                "id": job.spec.project_id,
                "path_with_namespace": job.spec.project_path,
                "name": job.spec.project_path.rsplit('/').next(),
            },
        })
    }
}

/// GitLab's time format in the REST API: ISO 8601 with milliseconds, in UTC.
fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}
