//! A typed async client for the control API, for tests in this or another process.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{
    CancelOutcome, CreatedPipeline, CreatedSchedule, EnqueuedJob, FaultId, FaultRule, JobBatch,
    JobSpec, JobStatus, JobView, NewApiToken, NewPipeline, NewRunner, RunnerView, ScheduleSpec,
    Stats, WaitFor,
};

/// Extra time the HTTP call gets beyond the server-side wait, so the `408` arrives first.
const WAIT_SLACK: Duration = Duration::from_secs(10);
/// Timeout of every call that does not wait on purpose.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("control API request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("control API answered {status} to {what}: {body}")]
    Status {
        what: String,
        status: StatusCode,
        body: String,
    },
    #[error("job {} not {} within {timeout:?}; last seen: {}", .view.id, .wanted.as_str(), view_json(.view))]
    WaitTimedOut {
        wanted: WaitFor,
        timeout: Duration,
        view: Box<JobView>,
    },
}

fn view_json(view: &JobView) -> String {
    serde_json::to_string(view).unwrap_or_else(|_| format!("{view:?}"))
}

/// Client for `/control/*` of one fake-gitlab.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    /// `base_url` is the server URL, e.g. [`crate::RunningServer::url`].
    pub fn new(base_url: impl Into<String>) -> Self {
        Self::with_ca(base_url, &[])
    }

    /// Like [`Client::new`], trusting the PEM CA certificates in `ca_pem` as well (for a fake
    /// serving TLS).
    pub fn with_ca(base_url: impl Into<String>, ca_pem: &[u8]) -> Self {
        let roots = reqwest::Certificate::from_pem_bundle(ca_pem).unwrap_or_default();
        // Loopback only: ignore any proxy from the environment.
        let http = reqwest::Client::builder()
            .no_proxy()
            .tls_certs_merge(roots)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Client {
            http,
            base: base_url.into().trim_end_matches('/').to_owned(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/control{path}", self.base)
    }

    async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        accept: &[StatusCode],
    ) -> Result<reqwest::Response, ClientError> {
        let response = request.send().await?;
        if accept.contains(&response.status()) {
            return Ok(response);
        }
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        Err(ClientError::Status {
            what: what.to_owned(),
            status,
            body,
        })
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let request = self.http.get(self.url(path)).timeout(CALL_TIMEOUT);
        let response = self.send(path, request, &[StatusCode::OK]).await?;
        Ok(response.json().await?)
    }

    async fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        expected: StatusCode,
    ) -> Result<T, ClientError> {
        let request = self
            .http
            .post(self.url(path))
            .json(body)
            .timeout(CALL_TIMEOUT);
        let response = self.send(path, request, &[expected]).await?;
        Ok(response.json().await?)
    }

    /// `POST /control/runners`.
    pub async fn add_runner(&self, token: &str) -> Result<RunnerView, ClientError> {
        let body = NewRunner {
            token: token.to_owned(),
        };
        self.post_json("/runners", &body, StatusCode::CREATED).await
    }

    /// `POST /control/registration_tokens`: `POST /api/v4/runners` accepts `token` from now on.
    pub async fn add_registration_token(&self, token: &str) -> Result<(), ClientError> {
        let body = NewRunner {
            token: token.to_owned(),
        };
        let _: serde_json::Value = self
            .post_json("/registration_tokens", &body, StatusCode::CREATED)
            .await?;
        Ok(())
    }

    /// `POST /control/api_tokens`: the REST API accepts `token` with `scopes` from now on.
    pub async fn add_api_token(&self, token: &str, scopes: &[&str]) -> Result<(), ClientError> {
        let body = NewApiToken {
            token: token.to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            name: None,
        };
        let _: serde_json::Value = self
            .post_json("/api_tokens", &body, StatusCode::CREATED)
            .await?;
        Ok(())
    }

    /// `POST /control/runners/:token/orphaned`: `Some(403 | 422)` makes GitLab answer the
    /// runner as orphaned, `None` heals it.
    pub async fn set_orphaned(&self, token: &str, status: Option<u16>) -> Result<(), ClientError> {
        let path = format!("/runners/{token}/orphaned");
        let request = self
            .http
            .post(self.url(&path))
            .json(&serde_json::json!({ "status": status }))
            .timeout(CALL_TIMEOUT);
        self.send(&path, request, &[StatusCode::NO_CONTENT]).await?;
        Ok(())
    }

    /// `GET /control/runners`.
    pub async fn runners(&self) -> Result<Vec<RunnerView>, ClientError> {
        self.get_json("/runners").await
    }

    /// `GET /control/runners/:token`.
    pub async fn runner(&self, token: &str) -> Result<RunnerView, ClientError> {
        self.get_json(&format!("/runners/{token}")).await
    }

    /// Waits until `token` has made at least `min_requests` job requests (e.g. to know that a
    /// long poll is being held). Errors with [`ClientError::Status`] `408` on timeout.
    pub async fn wait_runner_requests(
        &self,
        token: &str,
        min_requests: u64,
        timeout: Duration,
    ) -> Result<RunnerView, ClientError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let path = format!("/runners/{token}?min_requests={min_requests}&timeout_ms={timeout_ms}");
        let request = self.http.get(self.url(&path)).timeout(timeout + WAIT_SLACK);
        let response = self.send(&path, request, &[StatusCode::OK]).await?;
        Ok(response.json().await?)
    }

    /// `POST /control/jobs`.
    pub async fn enqueue(&self, spec: &JobSpec) -> Result<EnqueuedJob, ClientError> {
        self.post_json("/jobs", spec, StatusCode::CREATED).await
    }

    /// `POST /control/jobs/batch`: `count` copies of `spec`.
    pub async fn enqueue_batch(
        &self,
        spec: &JobSpec,
        count: u32,
    ) -> Result<Vec<EnqueuedJob>, ClientError> {
        let batch = JobBatch {
            spec: spec.clone(),
            count,
        };
        self.post_json("/jobs/batch", &batch, StatusCode::CREATED)
            .await
    }

    /// `POST /control/pipelines`: a pipeline of `stages`, run by stages as GitLab does.
    pub async fn create_pipeline(
        &self,
        stages: Vec<Vec<JobSpec>>,
    ) -> Result<CreatedPipeline, ClientError> {
        self.post_json("/pipelines", &NewPipeline { stages }, StatusCode::CREATED)
            .await
    }

    /// `POST /control/pipeline_schedules`: the schedule's id.
    pub async fn add_schedule(&self, spec: &ScheduleSpec) -> Result<u64, ClientError> {
        let created: CreatedSchedule = self
            .post_json("/pipeline_schedules", spec, StatusCode::CREATED)
            .await?;
        Ok(created.id)
    }

    /// `GET /control/jobs`.
    pub async fn jobs(&self) -> Result<Vec<JobView>, ClientError> {
        self.get_json("/jobs").await
    }

    /// `GET /control/jobs/:id`.
    pub async fn job(&self, id: u64) -> Result<JobView, ClientError> {
        self.get_json(&format!("/jobs/{id}")).await
    }

    /// `GET /control/jobs/:id?wait=…`: the view once reached; [`ClientError::WaitTimedOut`] (with
    /// the last view) when the server answers `408`.
    pub async fn wait(
        &self,
        id: u64,
        wanted: WaitFor,
        timeout: Duration,
    ) -> Result<JobView, ClientError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let path = format!(
            "/jobs/{id}?wait={}&timeout_ms={timeout_ms}",
            wanted.as_str()
        );
        let request = self.http.get(self.url(&path)).timeout(timeout + WAIT_SLACK);
        let response = self
            .send(
                &path,
                request,
                &[StatusCode::OK, StatusCode::REQUEST_TIMEOUT],
            )
            .await?;
        let timed_out = response.status() == StatusCode::REQUEST_TIMEOUT;
        let view: JobView = response.json().await?;
        if timed_out {
            return Err(ClientError::WaitTimedOut {
                wanted,
                timeout,
                view: Box::new(view),
            });
        }
        Ok(view)
    }

    /// Waits until the job is `running` or later.
    pub async fn wait_running(&self, id: u64, timeout: Duration) -> Result<JobView, ClientError> {
        self.wait(id, WaitFor::Running, timeout).await
    }

    /// Waits until the job is `success`, `failed` or `canceled`.
    pub async fn wait_final(&self, id: u64, timeout: Duration) -> Result<JobView, ClientError> {
        self.wait(id, WaitFor::Final, timeout).await
    }

    /// The stored trace, raw.
    pub async fn trace(&self, id: u64) -> Result<Vec<u8>, ClientError> {
        let path = format!("/jobs/{id}/trace");
        let request = self.http.get(self.url(&path)).timeout(CALL_TIMEOUT);
        let response = self.send(&path, request, &[StatusCode::OK]).await?;
        Ok(response.bytes().await?.to_vec())
    }

    /// A stored artifact file (`None` if the job has none of that type). Read into memory: use
    /// [`Client::artifact_response`] to stream a large one.
    pub async fn artifact(
        &self,
        id: u64,
        artifact_type: &str,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        match self.artifact_response(id, artifact_type).await? {
            Some(response) => Ok(Some(response.bytes().await?.to_vec())),
            None => Ok(None),
        }
    }

    /// The streaming response for a stored artifact (`None` if there is none).
    pub async fn artifact_response(
        &self,
        id: u64,
        artifact_type: &str,
    ) -> Result<Option<reqwest::Response>, ClientError> {
        let path = format!("/jobs/{id}/artifacts/{artifact_type}");
        let response = self
            .send(
                &path,
                self.http.get(self.url(&path)),
                &[StatusCode::OK, StatusCode::NOT_FOUND],
            )
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(response))
    }

    /// `POST /control/jobs/:id/cancel`: `canceling` or `canceled` (or the final status of a job
    /// that had already finished).
    pub async fn cancel(&self, id: u64) -> Result<JobStatus, ClientError> {
        self.cancel_with(id, false).await
    }

    /// Force-cancels: the job is `canceled` at once, without the graceful `canceling` step.
    pub async fn force_cancel(&self, id: u64) -> Result<JobStatus, ClientError> {
        self.cancel_with(id, true).await
    }

    async fn cancel_with(&self, id: u64, force: bool) -> Result<JobStatus, ClientError> {
        let path = format!("/jobs/{id}/cancel");
        let outcome: CancelOutcome = self
            .post_json(&path, &serde_json::json!({"force": force}), StatusCode::OK)
            .await?;
        Ok(outcome.status)
    }

    /// `POST /control/faults`: the rule's id.
    pub async fn add_fault(&self, rule: &FaultRule) -> Result<u64, ClientError> {
        let id: FaultId = self.post_json("/faults", rule, StatusCode::CREATED).await?;
        Ok(id.id)
    }

    /// `DELETE /control/faults/:id`.
    pub async fn remove_fault(&self, id: u64) -> Result<(), ClientError> {
        let path = format!("/faults/{id}");
        let request = self.http.delete(self.url(&path)).timeout(CALL_TIMEOUT);
        self.send(&path, request, &[StatusCode::NO_CONTENT]).await?;
        Ok(())
    }

    /// `DELETE /control/faults`.
    pub async fn clear_faults(&self) -> Result<(), ClientError> {
        let request = self.http.delete(self.url("/faults")).timeout(CALL_TIMEOUT);
        self.send("/faults", request, &[StatusCode::NO_CONTENT])
            .await?;
        Ok(())
    }

    /// `GET /control/stats`.
    pub async fn stats(&self) -> Result<Stats, ClientError> {
        self.get_json("/stats").await
    }
}
