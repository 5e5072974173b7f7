//! What the autoscaler itself sends GitLab for a job, and keeps trying until GitLab has it:
//!
//! - the job's **acknowledgement** (`PUT state=running`), when no sidecar's acceptance reached
//!   GitLab: the job waits for a machine, or GitLab was down when the sidecar accepted it;
//! - **artifact uploads** taken while GitLab was failing, spooled to disk;
//! - the **failure** (`runner_system_failure`) of a job whose machine was lost.
//!
//! Calls for one job are serialized (the relay and the maintenance loop both deliver) and kept in
//! order: acknowledgement first, uploads before any final state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderValue, Method};
use tokio::io::AsyncWriteExt;

use crate::clock::Clock;
use crate::core::backoff::Backoff;
use crate::core::job::{JobEvent, JobPhase};
use crate::core::{JobId, Millis};
use crate::jobs::{Jobs, JobsError};
use crate::store::{JobRecord, SpooledUpload};
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
        let (status, job_status) = self.send(call).await?;
        self.note_job_status(record.id, job_status);
        Ok(status)
    }

    /// Sends one of the autoscaler's own calls to GitLab, noting whether GitLab answered. `Err`
    /// when it did not, or asked to be called again later (5xx, 429); else its status and
    /// `Job-Status` header.
    async fn send(&self, call: Forward) -> Result<(u16, Option<String>), DeliveryError> {
        let answer = self.upstream.forward(call).await;
        let (status, job_status) = match answer {
            Ok(f) => (f.status.as_u16(), job_status(&f.headers)),
            Err(e) => {
                self.gitlab_answered(false);
                return Err(e.into());
            }
        };
        self.gitlab_answered(status < 500);
        if status >= 500 || status == 429 {
            return Err(DeliveryError::Status(status));
        }
        Ok((status, job_status))
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

    async fn acknowledge(&self, id: JobId) -> Result<(), DeliveryError> {
        let (Some(record), Some(body)) = (self.jobs.get(id), self.jobs.acceptance_body(id)) else {
            return Ok(());
        };
        if record.acknowledged {
            return Ok(());
        }
        match self.put(&record, body).await? {
            403 if self.last_job_status(record.id).as_deref() == Some("pending") => {
                // Requeued by GitLab and not yet handed back: the next hand-out brings it back.
                return Err(DeliveryError::Status(403));
            }
            200 | 202 => {
                tracing::info!(job.id = %id, "GitLab took the job's acknowledgement");
                self.jobs.set_acknowledged(id, true)?;
            }
            403 | 404 => {
                // GitLab no longer runs this job (canceled, or given to someone else).
                tracing::warn!(job.id = %id, "GitLab refused the job's acknowledgement; the job is over");
                self.jobs.set_acknowledged(id, true)?;
                self.jobs.apply(id, JobEvent::Ended)?;
            }
            other => return Err(DeliveryError::Status(other)),
        }
        Ok(())
    }

    /// Keeps an artifact upload on disk for GitLab and records it with the job (durably).
    pub async fn spool(
        &self,
        id: JobId,
        query: Option<String>,
        content_type: String,
        body: ByteStream,
    ) -> Result<(), DeliveryError> {
        let n = self.jobs.get(id).map_or(0, |r| r.spooled.len());
        let file = self
            .spool_dir
            .join(format!("job-{id}-{n}-{:08x}.upload", rand::random::<u32>()));
        let name = file.display().to_string();
        let err = |detail: String| DeliveryError::Spool {
            file: name.clone(),
            detail,
        };
        tokio::fs::create_dir_all(&self.spool_dir)
            .await
            .map_err(|e| err(e.to_string()))?;
        let mut out = tokio::fs::File::create(&file)
            .await
            .map_err(|e| err(e.to_string()))?;
        let mut size = 0u64;
        let mut body = body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| err(format!("reading the upload: {e}")))?;
            size += chunk.len() as u64;
            out.write_all(&chunk)
                .await
                .map_err(|e| err(e.to_string()))?;
        }
        out.sync_all().await.map_err(|e| err(e.to_string()))?;
        self.jobs.add_spooled(
            id,
            SpooledUpload {
                file: name.clone(),
                query,
                content_type,
                size,
            },
        )?;
        self.jobs.durable().await.map_err(JobsError::from)?;
        tracing::warn!(job.id = %id, bytes = size, file = %name, "GitLab is failing: artifacts kept on disk, to be uploaded when it answers");
        Ok(())
    }

    /// Uploads the job's spooled artifacts, in order.
    pub async fn upload_spooled(&self, id: JobId) -> Result<(), DeliveryError> {
        let turn = self.turn(id);
        let _turn = turn.lock().await;
        self.upload_spooled_locked(id).await
    }

    async fn upload_spooled_locked(&self, id: JobId) -> Result<(), DeliveryError> {
        let Some(record) = self.jobs.get(id) else {
            return Ok(());
        };
        for upload in record.spooled.clone() {
            let file =
                tokio::fs::File::open(&upload.file)
                    .await
                    .map_err(|e| DeliveryError::Spool {
                        file: upload.file.clone(),
                        detail: e.to_string(),
                    })?;
            let stream = tokio_util::io::ReaderStream::new(file).map_ok(Bytes::from);
            let mut headers = HeaderMap::new();
            if let Ok(ct) = HeaderValue::from_str(&upload.content_type) {
                headers.insert(http::header::CONTENT_TYPE, ct);
            }
            if let Ok(token) = HeaderValue::from_str(record.token.expose()) {
                headers.insert("job-token", token);
            }
            let call = Forward {
                method: Method::POST,
                path: format!("/api/v4/jobs/{id}/artifacts"),
                query: upload.query.clone(),
                headers,
                body: ForwardBody::Stream(Box::pin(stream)),
                timeout: UPLOAD_TIMEOUT,
            };
            let (status, job_status) = self.send(call).await?;
            if status == 403 && job_status.as_deref() == Some("pending") {
                // GitLab requeued the job (it never saw an acknowledgement): acknowledge it again
                // and come back; the artifacts are not refused, just early.
                self.jobs.set_acknowledged(id, false)?;
                return Err(DeliveryError::Status(status));
            }
            if status != 201 {
                // GitLab refused it for good (403 job over, 413 too large): nothing to retry.
                tracing::warn!(job.id = %id, status, "GitLab refused spooled artifacts; dropping them");
            } else {
                tracing::info!(job.id = %id, bytes = upload.size, "spooled artifacts uploaded");
            }
            self.jobs.remove_spooled(id, &upload.file)?;
            let _ = tokio::fs::remove_file(&upload.file).await;
        }
        Ok(())
    }

    /// Tells GitLab that a job whose machine was lost failed, after what it is owed first.
    async fn fail_locked(&self, record: &JobRecord, reason: &str) -> Result<(), DeliveryError> {
        if let Some(offset) = self.jobs.trace_length(record.id) {
            self.append_note(record, offset, reason).await;
        }
        let body = serde_json::json!({
            "token": record.token.expose(),
            "state": "failed",
            "failure_reason": "runner_system_failure",
        });
        match self.put(record, Bytes::from(body.to_string())).await? {
            202 => Err(DeliveryError::Status(202)),
            status => {
                tracing::warn!(job.id = %record.id, status, %reason, "job failed at GitLab: runner_system_failure");
                self.jobs.apply(record.id, JobEvent::Ended)?;
                Ok(())
            }
        }
    }

    /// A last line in the job's log saying why it failed (best effort).
    async fn append_note(&self, record: &JobRecord, offset: u64, reason: &str) {
        let text = format!(
            "\nERROR: the machine running this job was lost ({reason}). The job failed with runner_system_failure.\n"
        );
        let end = offset + text.len() as u64 - 1;
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        );
        if let (Ok(token), Ok(range)) = (
            HeaderValue::from_str(record.token.expose()),
            HeaderValue::from_str(&format!("{offset}-{end}")),
        ) {
            headers.insert("job-token", token);
            headers.insert("content-range", range);
        }
        let call = Forward {
            method: Method::PATCH,
            path: format!("/api/v4/jobs/{}/trace", record.id),
            query: None,
            headers,
            body: ForwardBody::Bytes(Bytes::from(text)),
            timeout: CALL_TIMEOUT,
        };
        let _ = self.upstream.forward(call).await;
    }

    /// Delivers everything owed for one job, in order. Used by the maintenance loop.
    async fn settle(&self, record: &JobRecord) -> Result<(), DeliveryError> {
        let turn = self.turn(record.id);
        let _turn = turn.lock().await;
        let Some(record) = self.jobs.get(record.id) else {
            return Ok(());
        };
        if !record.acknowledged
            && !matches!(
                record.phase,
                JobPhase::Failing { .. } | JobPhase::Finished { .. }
            )
        {
            self.acknowledge(record.id).await?;
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
        {
            let mut retries = self
                .retries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            retries.retain(|id, _| owing.iter().any(|r| r.id == *id));
            self.job_statuses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|id, _| owing.iter().any(|r| r.id == *id));
        }
        for record in owing {
            let due = self
                .retries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&record.id)
                .is_none_or(|(_, at)| *at <= now);
            if !due {
                continue;
            }
            match self.settle(&record).await {
                Ok(()) => {
                    self.retries
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&record.id);
                }
                Err(e) => {
                    let mut retries = self
                        .retries
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (backoff, at) = retries.entry(record.id).or_insert((
                        Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
                        0,
                    ));
                    let wait = backoff.fail(None, rand::random::<f64>());
                    *at = now + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    tracing::debug!(job.id = %record.id, error = %e, retry_in = ?wait, "delivery to GitLab failed; will retry");
                }
            }
        }
    }
}
