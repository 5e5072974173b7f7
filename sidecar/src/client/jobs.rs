//! The `/jobs` calls of a running runner: ask for a job (runner-protocol.md §3), update its
//! state (§4) and append to its trace (§5). Answers are handed to `classify` for the
//! decisions the trace loop acts on.

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};

use super::classify::{PatchOutcome, UpdateOutcome, classify_patch, classify_update};
use super::transport::header;
use super::{
    API_TIMEOUT, Client, ClientError, HEADER_JOB_STATUS, HEADER_JOB_TOKEN, HEADER_UPDATE_INTERVAL,
    JobRequestOutcome,
};
use crate::protocol::{JobOutput, JobRequest, JobResponse, JobState, RunnerInfo, UpdateJobRequest};
use crate::secret::Secret;

impl Client {
    /// `POST /jobs/request` (§3).
    pub async fn request_job(
        &self,
        token: &Secret,
        system_id: &str,
        info: &RunnerInfo,
    ) -> JobRequestOutcome {
        let last_update = self.last_update();
        let body = JobRequest {
            info,
            token,
            system_id,
            last_update: last_update.as_deref(),
        };
        let response = match self
            .json_call(
                Method::POST,
                "jobs/request",
                Some(token.expose()),
                &body,
                true,
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return JobRequestOutcome::Failed(e.to_string()),
        };
        match response.status() {
            StatusCode::CREATED => match Self::decode::<JobResponse>(response).await {
                Ok(job) => JobRequestOutcome::Job(Box::new(job)),
                Err(e) => {
                    // §3.2: a 201 that does not decode is a silently dropped job.
                    tracing::warn!(error = %e, "job payload could not be decoded; job dropped");
                    JobRequestOutcome::NoJob
                }
            },
            StatusCode::NO_CONTENT => JobRequestOutcome::NoJob,
            StatusCode::FORBIDDEN => JobRequestOutcome::Unhealthy,
            status => JobRequestOutcome::Failed(format!("unexpected answer {status}")),
        }
    }

    /// `PUT /jobs/:id` (§4): job token in body and `JOB-TOKEN`; the body is not parsed.
    #[allow(clippy::too_many_arguments)]
    pub async fn update_job(
        &self,
        job_id: i64,
        job_token: &Secret,
        info: &RunnerInfo,
        state: JobState,
        failure_reason: Option<&str>,
        output: &JobOutput,
        exit_code: Option<i32>,
    ) -> UpdateOutcome {
        let body = UpdateJobRequest {
            info,
            token: job_token,
            state,
            failure_reason,
            checksum: output.checksum.as_deref(),
            output,
            exit_code: exit_code.filter(|c| *c != 0),
        };
        let result = async {
            let url = self.endpoint(&format!("jobs/{job_id}"))?;
            let body =
                serde_json::to_vec(&body).map_err(|e| ClientError::BadJson(e.to_string()))?;
            self.send(Method::PUT, url, API_TIMEOUT, true, |rb| {
                Ok(rb
                    .header(CONTENT_TYPE, "application/json")
                    .header(HEADER_JOB_TOKEN, job_token.expose())
                    .body(body.clone()))
            })
            .await
        }
        .await;
        match result {
            Ok(response) => {
                self.remember_last_update(&response);
                let h = response.headers();
                classify_update(
                    Some(response.status().as_u16()),
                    header(h, HEADER_JOB_STATUS),
                    header(h, HEADER_UPDATE_INTERVAL),
                )
            }
            Err(e) => {
                tracing::warn!(job_id, error = %e, "job update failed");
                classify_update(None, None, None)
            }
        }
    }

    /// `PATCH /jobs/:id/trace?debug_trace=…` (§5) with `bytes` starting at `start`.
    pub async fn patch_trace(
        &self,
        job_id: i64,
        job_token: &Secret,
        start: u64,
        bytes: bytes::Bytes,
        debug_trace: bool,
    ) -> PatchOutcome {
        let len = bytes.len() as u64;
        let range = crate::trace::offsets::content_range(start, len);
        let result = async {
            let mut url = self.endpoint(&format!("jobs/{job_id}/trace"))?;
            url.query_pairs_mut()
                .append_pair("debug_trace", if debug_trace { "true" } else { "false" });
            self.send(Method::PATCH, url, API_TIMEOUT, true, |rb| {
                Ok(rb
                    .header(HEADER_JOB_TOKEN, job_token.expose())
                    .header(CONTENT_TYPE, "text/plain")
                    .header("Content-Range", &range)
                    .body(bytes.clone()))
            })
            .await
        }
        .await;
        match result {
            Ok(response) => {
                let h = response.headers();
                classify_patch(
                    Some(response.status().as_u16()),
                    header(h, HEADER_JOB_STATUS),
                    header(h, "Range"),
                    header(h, HEADER_UPDATE_INTERVAL),
                    start,
                    len,
                )
            }
            Err(e) => {
                tracing::warn!(job_id, error = %e, "trace patch failed");
                classify_patch(None, None, None, None, start, len)
            }
        }
    }
}
