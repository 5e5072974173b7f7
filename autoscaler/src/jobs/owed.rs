//! What the autoscaler owes GitLab for each job, and keeps until GitLab has it: the job's
//! acknowledgement, artifact uploads taken while GitLab was down, the failure of a job whose
//! machine was lost. All of it is in the job's record, so a restart owes the same.

use bytes::Bytes;

use super::{Jobs, JobsError};
use crate::core::job::{JobEvent, JobPhase};
use crate::core::{JobId, Millis, SidecarId};
use crate::store::SpooledUpload;

impl Jobs {
    /// The smallest acceptance GitLab takes for a job: its token and `state: running`.
    pub fn acceptance_body(&self, id: JobId) -> Option<Bytes> {
        let token = self.lock().get(&id)?.record.token.expose().to_string();
        Some(Bytes::from(
            serde_json::json!({"token": token, "state": "running"}).to_string(),
        ))
    }

    pub fn is_acknowledged(&self, id: JobId) -> bool {
        self.lock().get(&id).is_none_or(|j| j.record.acknowledged)
    }

    /// GitLab confirmed an acceptance of the job.
    pub fn set_acknowledged(&self, id: JobId, acknowledged: bool) -> Result<(), JobsError> {
        if self
            .lock()
            .get(&id)
            .is_some_and(|j| j.record.acknowledged == acknowledged)
        {
            return Ok(());
        }
        self.update(id, |r| r.acknowledged = acknowledged)
    }

    /// GitLab holds the job waiting for our acknowledgement (or no longer does).
    pub fn set_held(&self, id: JobId, held: bool) -> Result<(), JobsError> {
        if self.lock().get(&id).is_some_and(|j| j.record.held == held) {
            return Ok(());
        }
        let now = self.clock.now();
        self.update(id, |r| {
            r.held = held;
            if held {
                let why = "GitLab holds it for our acknowledgement (two-phase commit): its time does not run while it waits for a machine";
                super::timeline::push(r, super::timeline::step(now, "held", Some(why.into())));
            }
        })
    }

    /// GitLab refused a spooled upload for good; the job's final state will say so.
    pub fn set_artifact_refusal(&self, id: JobId, refusal: String) -> Result<(), JobsError> {
        self.update(id, |r| r.artifact_refusal = Some(refusal))
    }

    /// A running job found at start-up that GitLab has not confirmed yet (the store may have
    /// lost its end in the crash).
    pub fn is_unconfirmed(&self, id: JobId) -> bool {
        self.lock().get(&id).is_some_and(|j| j.unconfirmed)
    }

    /// GitLab confirmed that a running job found at start-up still runs.
    pub fn confirm_running(&self, id: JobId) {
        if let Some(j) = self.lock().get_mut(&id) {
            j.unconfirmed = false;
        }
    }

    pub fn add_spooled(&self, id: JobId, upload: SpooledUpload) -> Result<(), JobsError> {
        self.update(id, |r| r.spooled.push(upload))
    }

    pub fn remove_spooled(&self, id: JobId, file: &str) -> Result<(), JobsError> {
        self.update(id, |r| r.spooled.retain(|u| u.file != file))
    }

    /// Jobs for which GitLab is owed something now: a keep-alive (jobs waiting for a machine,
    /// or handed to a sidecar longer than `ack_grace` without its acceptance: a sidecar accepts
    /// at once itself), an acknowledgement (a sidecar accepted but GitLab did not hear it),
    /// spooled uploads, or a failure. The caller paces keep-alives. Ids, not records: after a
    /// restart every running job is owed a keep-alive, and a copy of each record would double
    /// the jobs' memory while the calls go out one by one.
    pub fn owing(&self, ack_grace: Millis) -> Vec<JobId> {
        let now = self.clock.now();
        self.lock()
            .values()
            .filter(|j| {
                let r = &j.record;
                let contact_due = match &r.phase {
                    JobPhase::Queued => true,
                    JobPhase::Assigned { at, .. } => now.saturating_sub(*at) >= ack_grace,
                    JobPhase::Running { since, .. } => {
                        j.unconfirmed
                            || (!r.acknowledged && now.saturating_sub(*since) >= ack_grace)
                    }
                    JobPhase::Failing { .. } | JobPhase::Finished { .. } => false,
                };
                contact_due || !r.spooled.is_empty() || matches!(r.phase, JobPhase::Failing { .. })
            })
            .map(|j| j.record.id)
            .collect()
    }

    /// The sidecar holding these jobs is gone: those it had not accepted go back to the queue
    /// (returned, to be offered again), those it ran are failing.
    pub fn lose_sidecar(&self, sidecar: SidecarId, reason: &str) -> Result<Vec<JobId>, JobsError> {
        let held: Vec<JobId> = self
            .lock()
            .values()
            .filter(|j| match &j.record.phase {
                JobPhase::Assigned { sidecar: s, .. } => *s == sidecar,
                JobPhase::Running { sidecar: s, .. } => *s == Some(sidecar),
                _ => false,
            })
            .map(|j| j.record.id)
            .collect();
        let mut requeued = Vec::new();
        for id in held {
            let (before, after) = self.apply(
                id,
                JobEvent::Lost {
                    reason: format!("the machine running this job was lost ({reason})"),
                },
            )?;
            match after {
                JobPhase::Queued => requeued.push(id),
                JobPhase::Failing { .. } => {
                    tracing::warn!(job.id = %id, sidecar.id = %sidecar, %reason, from = before.name(),
                        "the job's machine was lost while it ran; failing it at GitLab");
                }
                _ => {}
            }
        }
        Ok(requeued)
    }

    /// Queued jobs of `pool` that waited longer than `timeout` for a sidecar.
    pub fn waited_too_long(&self, pool: &str, timeout: Millis) -> Vec<JobId> {
        let now = self.clock.now();
        self.lock()
            .values()
            .filter(|j| {
                j.record.pool == pool
                    && j.record.phase.is_queued()
                    && now.saturating_sub(j.record.accepted_at) >= timeout
            })
            .map(|j| j.record.id)
            .collect()
    }
}

#[cfg(test)]
impl Jobs {
    /// Job `id` handed to `sidecar`, accepted by it and acknowledged to GitLab (the state a
    /// running job is stored in), for tests of what follows.
    pub(crate) fn start_running(&self, id: JobId, sidecar: crate::core::SidecarId) {
        self.apply(id, crate::core::job::JobEvent::HandedOut { sidecar })
            .unwrap();
        self.apply(id, crate::core::job::JobEvent::Accepted)
            .unwrap();
        self.set_acknowledged(id, true).unwrap();
    }
}
