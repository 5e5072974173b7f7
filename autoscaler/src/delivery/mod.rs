//! What the autoscaler itself sends GitLab for a job, and keeps trying until GitLab has it:
//!
//! - **keep-alives** for a job waiting for a machine (`contact.rs`): `PUT state=pending` while
//!   GitLab holds it for our acknowledgement (two-phase commit), `PUT state=running` where GitLab
//!   runs it since hand-out; either way GitLab's `Job-Status` tells us within seconds that the
//!   job was canceled or failed, and it is dropped before any machine runs it;
//! - the job's **acknowledgement** (`PUT state=running`) when a sidecar accepted it but GitLab
//!   did not hear it;
//! - **artifact uploads** taken while GitLab was failing, spooled to disk (`spool.rs`);
//! - the **failure** of a job whose machine was lost (`runner_interrupted`, or
//!   `runner_system_failure` where GitLab does not list that reason), or that no machine took.
//!
//! Calls for one job are serialized (the relay and the maintenance loop both deliver) and kept in
//! order: acknowledgement first, uploads before any final state.

mod contact;
mod spool;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, Method};

use crate::clock::Clock;
use crate::core::backoff::Backoff;
use crate::core::job::JobPhase;
use crate::core::{JobId, Millis};
use crate::jobs::{Jobs, JobsError};
use crate::store::JobRecord;
use crate::upstream::{ByteStream, Forward, ForwardBody, Upstream, UpstreamError};

/// How long after a failed call GitLab counts as failing (uploads are then spooled).
const FAILING_WINDOW_MS: Millis = 30_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("GitLab answered {0}")]
    Status(u16),
    #[error(transparent)]
    Jobs(#[from] JobsError),
    #[error("spool file {file}: {detail}")]
    Spool { file: String, detail: String },
}

#[derive(Debug)]
pub struct Delivery {
    upstream: Arc<dyn Upstream>,
    jobs: Arc<Jobs>,
    clock: Arc<dyn Clock>,
    spool_dir: PathBuf,
    /// One delivery at a time per job.
    turns: Mutex<HashMap<JobId, Arc<tokio::sync::Mutex<()>>>>,
    /// Per job: failed attempts and when the next background attempt is due.
    retries: Mutex<HashMap<JobId, (Backoff, Millis)>>,
    /// When a call to GitLab last failed (0: not recently).
    last_failure: AtomicU64,
    /// The `Job-Status` of GitLab's last answer about each job, while the job is owed something.
    job_statuses: Mutex<HashMap<JobId, String>>,
    /// When each waiting job was last confirmed with GitLab.
    contacts: Mutex<HashMap<JobId, Millis>>,
    /// How often a waiting job is confirmed (well inside GitLab's 2-minute window).
    keepalive: Millis,
    /// Jobs whose log already tells that GitLab refused their spooled artifacts (the runner's
    /// final update may be asked again).
    refusals_noted: Mutex<std::collections::HashSet<JobId>>,
}

/// What GitLab answered one of our calls.
#[derive(Debug)]
struct Answer {
    status: u16,
    job_status: Option<String>,
    /// GitLab's error message (`{"message": ...}` or the text), for 4xx answers.
    message: Option<String>,
}

/// The first 2 KiB of an error body, as GitLab's `message` when it is JSON.
async fn error_message(mut body: ByteStream) -> String {
    const LIMIT: usize = 2048;
    let mut bytes = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= LIMIT {
            bytes.truncate(LIMIT);
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| match v.get("message").or_else(|| v.get("error")) {
            Some(serde_json::Value::String(m)) => Some(m.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        })
        .unwrap_or(text)
}

/// Keeps only the entries of `map` for the jobs in `keep`.
fn forget_others<V>(map: &Mutex<HashMap<JobId, V>>, keep: &std::collections::HashSet<JobId>) {
    map.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|id, _| keep.contains(id));
}

fn job_status(headers: &HeaderMap) -> Option<String> {
    headers
        .get("job-status")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

impl Delivery {
    pub fn new(
        upstream: Arc<dyn Upstream>,
        jobs: Arc<Jobs>,
        clock: Arc<dyn Clock>,
        spool_dir: PathBuf,
        keepalive: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            jobs,
            clock,
            spool_dir,
            turns: Mutex::new(HashMap::new()),
            retries: Mutex::new(HashMap::new()),
            last_failure: AtomicU64::new(0),
            job_statuses: Mutex::new(HashMap::new()),
            contacts: Mutex::new(HashMap::new()),
            keepalive: u64::try_from(keepalive.as_millis()).unwrap_or(u64::MAX),
            refusals_noted: Mutex::new(std::collections::HashSet::new()),
        })
    }

    fn turn(&self, id: JobId) -> Arc<tokio::sync::Mutex<()>> {
        self.turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(id)
            .or_default()
            .clone()
    }

    fn note_job_status(&self, id: JobId, status: Option<String>) {
        let mut statuses = self
            .job_statuses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match status {
            Some(s) => {
                statuses.insert(id, s);
            }
            None => {
                statuses.remove(&id);
            }
        }
    }

    fn last_job_status(&self, id: JobId) -> Option<String> {
        self.job_statuses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    /// Relayed and delivered calls report here whether GitLab answered. The change between
    /// answering and failing is logged once each way, not per call.
    pub fn gitlab_answered(&self, ok: bool) {
        let value = if ok { 0 } else { self.clock.now().max(1) };
        let before = self.last_failure.swap(value, Ordering::Relaxed);
        match (before == 0, ok) {
            (true, false) => tracing::warn!(
                "GitLab fails relayed calls: running jobs keep running, their calls are answered with GitLab's status, \
                 artifacts are kept on disk until it answers"
            ),
            (false, true) => tracing::info!("GitLab answers relayed calls again"),
            _ => {}
        }
    }

    /// GitLab failed a call in the last half minute.
    pub fn gitlab_failing(&self) -> bool {
        let at = self.last_failure.load(Ordering::Relaxed);
        at != 0 && self.clock.now().saturating_sub(at) < FAILING_WINDOW_MS
    }

    /// `PUT /jobs/:id` with the job's token and `{"state": state}` (plus `extra` fields).
    async fn put_state(
        &self,
        record: &JobRecord,
        state: &str,
        extra: serde_json::Value,
    ) -> Result<u16, DeliveryError> {
        let mut body = serde_json::json!({ "token": record.token.expose(), "state": state });
        if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
            body.extend(extra);
        }
        self.put(record, Bytes::from(body.to_string())).await
    }

    async fn put(&self, record: &JobRecord, body: Bytes) -> Result<u16, DeliveryError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(token) = HeaderValue::from_str(record.token.expose()) {
            headers.insert("job-token", token);
        }
        let call = Forward {
            method: Method::PUT,
            path: format!("/api/v4/jobs/{}", record.id),
            query: None,
            headers,
            body: ForwardBody::Bytes(body),
            timeout: CALL_TIMEOUT,
        };
        let answer = self.send(call).await?;
        self.note_job_status(record.id, answer.job_status);
        Ok(answer.status)
    }

    /// Sends one of the autoscaler's own calls to GitLab, noting whether GitLab answered. `Err`
    /// when it did not, or asked to be called again later (5xx, 429); else its answer.
    async fn send(&self, call: Forward) -> Result<Answer, DeliveryError> {
        let forwarded = match self.upstream.forward(call).await {
            Ok(forwarded) => forwarded,
            Err(e) => {
                self.gitlab_answered(false);
                return Err(e.into());
            }
        };
        let status = forwarded.status.as_u16();
        self.gitlab_answered(status < 500);
        if status >= 500 || status == 429 {
            return Err(DeliveryError::Status(status));
        }
        let job_status = job_status(&forwarded.headers);
        let message = if status >= 400 {
            Some(error_message(forwarded.body).await)
        } else {
            None
        };
        Ok(Answer {
            status,
            job_status,
            message,
        })
    }

    /// Delivers everything owed for one job, in order. Used by the maintenance loop.
    async fn settle(&self, id: JobId) -> Result<(), DeliveryError> {
        let turn = self.turn(id);
        let _turn = turn.lock().await;
        let Some(record) = self.jobs.get(id) else {
            return Ok(());
        };
        match record.phase {
            JobPhase::Queued | JobPhase::Assigned { .. } if self.contact_due(record.id) => {
                self.keep_in_touch(&record).await?;
            }
            JobPhase::Running { .. } if !record.acknowledged => {
                self.acknowledge(record.id).await?;
            }
            // Found running at start-up: one keep-alive says whether GitLab still runs it.
            JobPhase::Running { .. }
                if self.jobs.is_unconfirmed(record.id) && self.contact_due(record.id) =>
            {
                self.keep_in_touch(&record).await?;
            }
            _ => {}
        }
        self.upload_spooled_locked(record.id).await?;
        if let JobPhase::Failing { reason, .. } = &record.phase {
            self.fail_locked(&record, reason).await?;
        }
        Ok(())
    }

    /// One pass over every job that is owed something, each at most as often as its backoff
    /// allows. `ack_grace`: how long a sidecar has to acknowledge a job itself.
    pub async fn deliver_owed(&self, ack_grace: Millis) {
        let now = self.clock.now();
        let owing = self.jobs.owing(ack_grace);
        // Forget what was kept for jobs no longer owed anything (every waiting job is owed
        // keep-alives, so this set can be large: one lookup per entry).
        let owed: std::collections::HashSet<JobId> = owing.iter().copied().collect();
        forget_others(&self.retries, &owed);
        forget_others(&self.job_statuses, &owed);
        forget_others(&self.contacts, &owed);
        for id in owing {
            let due = self
                .retries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&id)
                .is_none_or(|(_, at)| *at <= now);
            if !due {
                continue;
            }
            match self.settle(id).await {
                Ok(()) => {
                    self.retries
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&id);
                }
                Err(e) => {
                    let mut retries = self
                        .retries
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (backoff, at) = retries.entry(id).or_insert((
                        Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
                        0,
                    ));
                    let wait = backoff.fail(None, rand::random::<f64>());
                    *at = now + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    tracing::debug!(job.id = %id, error = %e, retry_in = ?wait, "delivery to GitLab failed; will retry");
                }
            }
        }
    }
}
