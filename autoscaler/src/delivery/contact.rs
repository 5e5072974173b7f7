//! Staying in touch with GitLab about a job that has not started on a machine yet, and the
//! autoscaler's own final update of a job it gives up.
//!
//! A job waiting for a machine is confirmed every `keepalive` (runner-protocol.md §3.5):
//! - not yet acknowledged: `PUT state=pending`. `200` means GitLab holds it for us (two-phase
//!   commit; its clock has not started); `400` means GitLab runs it since hand-out (two-phase
//!   off), and `409` that a runner manager already took it: both count as acknowledged;
//! - acknowledged: `PUT state=running`, a plain keep-alive.
//!
//! Either way GitLab's `Job-Status` says within one interval that the job was canceled or
//! failed (a missed acknowledgement ends as `runner_provisioning_timeout`): the job is dropped
//! before a machine runs it, with one log line.
//!
//! A job the store still had as running at start-up gets one such keep-alive too: its sidecar
//! may have finished it before the crash, with the end not yet on disk. GitLab's `403` (or a
//! `Job-Status` that is over) ends it here, which frees its machine; a `200` confirms it.

use serde_json::json;

use super::{Delivery, DeliveryError};
use crate::core::JobId;
use crate::core::job::{JobEvent, JobPhase};
use crate::store::JobRecord;

/// `Job-Status` values after which nothing can run.
fn is_over(job_status: Option<&str>) -> bool {
    matches!(job_status, Some("canceled" | "failed" | "success"))
}

impl Delivery {
    /// A keep-alive is due for this job (none sent yet, or the last one `keepalive` ago).
    pub(super) fn contact_due(&self, id: JobId) -> bool {
        let now = self.clock.now();
        self.contacts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .is_none_or(|at| now.saturating_sub(*at) >= self.keepalive)
    }

    fn touched(&self, id: JobId) {
        let now = self.clock.now();
        self.contacts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, now);
    }

    /// One keep-alive for a job waiting for (or just handed to) a sidecar.
    pub(super) async fn keep_in_touch(&self, record: &JobRecord) -> Result<(), DeliveryError> {
        let id = record.id;
        let state = if record.acknowledged {
            "running"
        } else {
            "pending"
        };
        let status = self.put_state(record, state, json!({})).await?;
        self.touched(id);
        let job_status = self.last_job_status(id);
        match (state, status) {
            ("pending", 200) => self.jobs.set_held(id, true)?,
            ("pending", 400 | 409) => {
                tracing::debug!(job.id = %id, status, "GitLab runs the job already; keep-alives confirm it");
                self.jobs.set_held(id, false)?;
                self.jobs.set_acknowledged(id, true)?;
            }
            ("running", 200) => self.jobs.confirm_running(id),
            (_, 403 | 404) if matches!(record.phase, JobPhase::Running { .. }) => {
                return self.over_at_gitlab(record, status, job_status);
            }
            (_, 403 | 404) => return self.dropped_by_gitlab(record, status, job_status),
            (_, other) => return Err(DeliveryError::Status(other)),
        }
        let running = matches!(record.phase, JobPhase::Running { .. });
        match job_status.as_deref() {
            js if running && is_over(js) => self.over_at_gitlab(record, status, job_status),
            // A running job's sidecar hears a cancel on its own calls and ends the job itself.
            _ if running => Ok(()),
            Some("canceling") => self.give_up_canceling(record).await,
            js if is_over(js) => self.dropped_by_gitlab(record, status, job_status),
            _ => Ok(()),
        }
    }

    /// GitLab ended a job that had not started here: drop it before a machine runs it.
    fn dropped_by_gitlab(
        &self,
        record: &JobRecord,
        status: u16,
        job_status: Option<String>,
    ) -> Result<(), DeliveryError> {
        tracing::warn!(job.id = %record.id, pool = %record.pool, status, job_status = job_status.as_deref().unwrap_or("-"),
            "GitLab ended the job while it waited for a machine (canceled, or failed such as runner_provisioning_timeout); dropped");
        self.jobs.apply(record.id, JobEvent::Ended)?;
        Ok(())
    }

    /// A running job (found in the store at start-up) that GitLab has ended: its sidecar
    /// finished it before the crash, and the store had not kept the end yet.
    fn over_at_gitlab(
        &self,
        record: &JobRecord,
        status: u16,
        job_status: Option<String>,
    ) -> Result<(), DeliveryError> {
        tracing::info!(job.id = %record.id, pool = %record.pool, status, job_status = job_status.as_deref().unwrap_or("-"),
            "a job the store still had as running is over at GitLab (finished before the restart); ended here too");
        self.jobs.apply(record.id, JobEvent::Ended)?;
        Ok(())
    }

    /// Canceled gracefully while it waited: end it as a runner ends a canceling job, with a
    /// final update (GitLab records it as canceled whatever state it names).
    async fn give_up_canceling(&self, record: &JobRecord) -> Result<(), DeliveryError> {
        let status = self.put_state(record, "failed", json!({})).await?;
        tracing::warn!(job.id = %record.id, pool = %record.pool, status,
            "GitLab canceled the job while it waited for a machine; dropped");
        self.jobs.apply(record.id, JobEvent::Ended)?;
        Ok(())
    }

    /// Sends the job's acknowledgement unless GitLab already confirmed one. `Err` while GitLab
    /// cannot take it (the caller answers the sidecar `502`, and the runner retries).
    pub async fn ensure_acknowledged(&self, id: JobId) -> Result<(), DeliveryError> {
        if self.jobs.is_acknowledged(id) {
            return Ok(());
        }
        let turn = self.turn(id);
        let _turn = turn.lock().await;
        self.acknowledge(id).await
    }

    pub(super) async fn acknowledge(&self, id: JobId) -> Result<(), DeliveryError> {
        let Some(record) = self.jobs.get(id) else {
            return Ok(());
        };
        if record.acknowledged {
            return Ok(());
        }
        match self.put_state(&record, "running", json!({})).await? {
            200 | 202 => {
                tracing::info!(job.id = %id, "GitLab took the job's acknowledgement");
                self.jobs.set_acknowledged(id, true)?;
                self.jobs.set_held(id, false)?;
            }
            // 403/404: canceled, failed, or its acknowledgement window passed (GitLab fails it as
            // runner_provisioning_timeout and never hands it out again); 400: two-phase commit
            // found no runner manager waiting any more. Nothing can make GitLab run it now.
            status @ (400 | 403 | 404) => {
                let job_status = self.last_job_status(id);
                tracing::warn!(job.id = %id, status, job_status = job_status.as_deref().unwrap_or("-"),
                    "GitLab refused the job's acknowledgement; the job is over");
                self.jobs.set_acknowledged(id, true)?;
                self.jobs.apply(id, JobEvent::Ended)?;
            }
            other => return Err(DeliveryError::Status(other)),
        }
        Ok(())
    }

    /// Tells GitLab that a job it gave us failed (`runner_system_failure`, which CI `retry:`
    /// can rerun, or `runner_interrupted` for a job whose machine was lost under it where the
    /// payload lists that reason, as a stock runner reports an interrupted job), after what it
    /// is owed first, with a last line in its log saying why.
    ///
    /// Only GitLab's `200` counts as delivered; `202` is asked again later. `403`/`404`: GitLab
    /// has ended the job already. `400`/`409`: GitLab's state of the job takes no final update
    /// from us (a job still held for acknowledgement is released by ceasing keep-alives); the
    /// refusal is logged and the job ends here. Anything else is retried with backoff.
    pub(super) async fn fail_locked(
        &self,
        record: &JobRecord,
        reason: &str,
    ) -> Result<(), DeliveryError> {
        let failure = failure_reason(record);
        if let Some(offset) = self.jobs.trace_length(record.id) {
            let note = format!("\nERROR: {reason}. The job failed with {failure}.\n");
            self.append_note(record, offset, &note).await;
        }
        let extra = json!({ "failure_reason": failure });
        let status = self.put_state(record, "failed", extra).await?;
        match status {
            200 => {
                tracing::warn!(job.id = %record.id, %reason, failure, "job failed at GitLab")
            }
            403 | 404 => {
                tracing::info!(job.id = %record.id, status, %reason, "GitLab had ended the job already")
            }
            400 | 409 => {
                tracing::warn!(job.id = %record.id, status, %reason, "GitLab refused the job's failure; it ends here")
            }
            other => return Err(DeliveryError::Status(other)),
        }
        self.jobs.apply(record.id, JobEvent::Ended)?;
        Ok(())
    }
}

/// The failure reason GitLab is given for a job failed here: `runner_interrupted` for one whose
/// machine was lost while it ran, where its payload lists that reason (gitlab-runner sends it
/// since v19.1 for a job it aborts when stopped forcefully, a reclaimed machine among the
/// causes); `runner_system_failure` otherwise, and for any job on an older GitLab.
fn failure_reason(record: &JobRecord) -> &'static str {
    let interrupted = matches!(
        record.phase,
        JobPhase::Failing {
            interrupted: true,
            ..
        }
    );
    if interrupted && record.runner_interrupted_listed {
        "runner_interrupted"
    } else {
        "runner_system_failure"
    }
}
