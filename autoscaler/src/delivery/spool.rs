//! Artifact uploads kept on disk while GitLab was failing, and what becomes of them.
//!
//! The runner was answered `201` when its upload was spooled, so a refusal GitLab gives later
//! (`403`, `413`, `400`) must still reach the job's outcome: it is recorded with the job, and the
//! runner's final update is turned into the failure a stock runner would have reported had it
//! seen GitLab's answer itself (`script_failure`, with GitLab's status and message in the log).
//! Uploads never run inside the runner's final `PUT`: while they are in flight that `PUT` is
//! answered `202` (GitLab's "accepted, come back later"), and the runner asks again.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderValue, Method};
use tokio::io::AsyncWriteExt;

use super::{CALL_TIMEOUT, Delivery, DeliveryError, UPLOAD_TIMEOUT};
use crate::core::JobId;
use crate::jobs::JobsError;
use crate::store::{JobRecord, SpooledUpload};
use crate::upstream::{ByteStream, Forward, ForwardBody};

impl Delivery {
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

    /// Whether the job still has spooled uploads; if so, makes sure they are on their way in
    /// the background (the caller answers the runner's final update `202` meanwhile). The turn
    /// is taken before this returns, so the upload cannot be overtaken by the final state.
    pub fn uploads_pending(self: &Arc<Self>, id: JobId) -> bool {
        if self.jobs.get(id).is_none_or(|r| r.spooled.is_empty()) {
            return false;
        }
        // Busy: another delivery for this job (an earlier upload, the maintenance loop) runs,
        // and uploads in its turn.
        if let Ok(turn) = self.turn(id).try_lock_owned() {
            let delivery = Arc::clone(self);
            tokio::spawn(async move {
                let _turn = turn;
                if let Err(e) = delivery.upload_spooled_locked(id).await {
                    tracing::warn!(job.id = %id, error = %e, "spooled artifacts not uploaded yet; will retry");
                }
            });
        }
        true
    }

    /// Waits until no delivery for the job is under way (tests).
    #[cfg(test)]
    pub async fn settled(&self, id: JobId) {
        let turn = self.turn(id);
        let _turn = turn.lock().await;
    }

    pub(super) async fn upload_spooled_locked(&self, id: JobId) -> Result<(), DeliveryError> {
        let Some(record) = self.jobs.get(id) else {
            return Ok(());
        };
        for upload in record.spooled.clone() {
            let answer = self.send(upload_call(&record, &upload).await?).await?;
            if answer.status == 201 {
                tracing::info!(job.id = %id, bytes = upload.size, "spooled artifacts uploaded");
            } else {
                // Refused for good (403 job over, 413 too large, 400 invalid): the job says so.
                let message = answer.message.unwrap_or_default();
                let refusal = format!("{} {message}", answer.status);
                tracing::warn!(job.id = %id, status = answer.status, %message,
                    "GitLab refused spooled artifacts; the job will fail with the reason in its log");
                self.jobs.set_artifact_refusal(id, refusal)?;
            }
            self.jobs.remove_spooled(id, &upload.file)?;
            let _ = tokio::fs::remove_file(&upload.file).await;
        }
        Ok(())
    }

    /// The runner's final update, made to tell the refusal of spooled artifacts: the log gets
    /// GitLab's status and message, and the state becomes `failed` (`script_failure`, as a
    /// runner reports a failed upload step). Unchanged when nothing was refused.
    pub async fn final_update_body(&self, record: &JobRecord, body: Bytes) -> Bytes {
        let Some(refusal) = &record.artifact_refusal else {
            return body;
        };
        let first = self
            .refusals_noted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(record.id);
        if first && let Some(offset) = self.jobs.trace_length(record.id) {
            let note = format!(
                "\nERROR: Uploading artifacts to GitLab failed: {refusal} (they were kept by the autoscaler while GitLab was unavailable).\n"
            );
            self.append_note(record, offset, &note).await;
        }
        let Ok(serde_json::Value::Object(mut update)) = serde_json::from_slice(&body) else {
            return body;
        };
        update.insert("state".into(), "failed".into());
        update.insert("failure_reason".into(), "script_failure".into());
        Bytes::from(serde_json::Value::Object(update).to_string())
    }

    /// Appends `text` to the job's log at `offset` (best effort).
    pub(super) async fn append_note(&self, record: &JobRecord, offset: u64, text: &str) {
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
            body: ForwardBody::Bytes(Bytes::from(text.to_string())),
            timeout: CALL_TIMEOUT,
        };
        if let Ok(answer) = self.upstream.forward(call).await
            && let Some(length) = crate::upstream::range_end(&answer.headers)
        {
            self.jobs.set_trace_length(record.id, length);
        }
    }
}

async fn upload_call(record: &JobRecord, upload: &SpooledUpload) -> Result<Forward, DeliveryError> {
    let file = tokio::fs::File::open(&upload.file)
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
    Ok(Forward {
        method: Method::POST,
        path: format!("/api/v4/jobs/{}/artifacts", record.id),
        query: upload.query.clone(),
        headers,
        body: ForwardBody::Stream(Box::pin(stream)),
        timeout: UPLOAD_TIMEOUT,
    })
}
