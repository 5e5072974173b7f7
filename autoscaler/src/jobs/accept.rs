//! Taking a job from GitLab: its record stored before it can run, its machine class checked,
//! and its arrival noted for the pool's demand forecast. A job that cannot be stored or run here
//! is kept only to be failed at GitLab.

use bytes::Bytes;

use super::news::JobNews;
use super::{Accepted, Held, Jobs, JobsError, timeline, unstored_reason};
use crate::core::job::JobPhase;
use crate::core::payload;
use crate::secret::Secret;
use crate::store::{DependencyGrant, JobRecord};

impl Jobs {
    /// Records a job GitLab gave `pool`. Written, not yet flushed: whoever acts on the job
    /// (hands it out, acknowledges it) first awaits [`Jobs::durable`], so that one flush covers
    /// the acceptance and the hand-out.
    pub fn accept(&self, pool: &str, payload: &[u8]) -> Result<Accepted, JobsError> {
        let kept_payload = payload::without_suspend_options(payload);
        let suspend_removed = matches!(kept_payload, std::borrow::Cow::Owned(_));
        let payload = &*kept_payload;
        let facts = payload::parse(payload)?;
        if self.lock().contains_key(&facts.id) {
            return Ok(Accepted::Again(facts.id));
        }
        if suspend_removed {
            tracing::info!(job.id = %facts.id, pool, "the job asked for its environment to be suspended; machines here are destroyed when idle, so it runs without (suspend_options removed)");
        }
        let mut record = JobRecord {
            id: facts.id,
            pool: pool.to_string(),
            token: Secret::new(facts.token),
            dependencies: facts
                .dependencies
                .into_iter()
                .filter_map(|(id, token)| {
                    token.map(|t| DependencyGrant {
                        id,
                        token: Secret::new(t),
                    })
                })
                .collect(),
            project_id: facts.project_id,
            pipeline: facts.place.clone(),
            class: None,
            phase: JobPhase::Queued,
            accepted_at: self.clock.now(),
            queued_at_gitlab_ms: facts.queued_at_gitlab_ms,
            runner_interrupted_listed: facts.runner_interrupted_listed,
            acknowledged: false,
            held: false,
            artifact_refusal: None,
            spooled: Vec::new(),
            timeline: Vec::new(),
            failed: false,
        };
        let taken = format!("GitLab handed it to pool {pool}");
        let taken = timeline::step(record.accepted_at, "taken", Some(taken));
        timeline::push(&mut record, taken);
        let refused = match self.class_for(pool, payload) {
            Ok(class) => {
                record.class = class;
                false
            }
            Err(why) => {
                tracing::warn!(job.id = %record.id, pool, reason = %why, "the job cannot run here; it is failed at GitLab");
                record.phase = JobPhase::Failing {
                    reason: why,
                    since: record.accepted_at,
                    interrupted: false,
                };
                true
            }
        };
        let stored = self
            .store
            .put_payload(record.id, payload)
            .and_then(|()| self.store.put_job(&record));
        let unstored = stored.is_err();
        if let Err(e) = stored {
            // A job the store does not hold must not run: a crash would lose it. GitLab already
            // counts it ours, so it is given back as a failure GitLab can retry: where GitLab
            // waits for our acknowledgement it refuses the failure and, no keep-alive coming,
            // fails it as runner_provisioning_timeout; else it records runner_system_failure.
            self.store_refused(&e);
            tracing::warn!(job.id = %record.id, pool, "job not stored: it is not run and goes back to GitLab as a failure");
            record.phase = JobPhase::Failing {
                reason: unstored_reason(&e),
                since: record.accepted_at,
                interrupted: false,
            };
        }
        let id = record.id;
        // A job failed before any runner saw it has an empty log at GitLab: the note saying why
        // goes at its start.
        let never_ran = matches!(record.phase, JobPhase::Failing { .. });
        if !refused {
            self.record_news(pool, JobNews::arrived(&record, facts.queue_size));
        }
        let kept = (!unstored).then(|| Bytes::copy_from_slice(payload));
        self.lock().insert(
            id,
            Box::new(Held {
                record,
                trace_length: never_ran.then_some(0),
                payload: kept,
                unconfirmed: false,
            }),
        );
        self.bump();
        Ok(if unstored {
            Accepted::Unstored(id)
        } else if refused {
            Accepted::Refused(id)
        } else {
            Accepted::New(id)
        })
    }
}
