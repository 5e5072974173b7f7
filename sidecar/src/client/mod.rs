//! HTTP client for GitLab's runner API (runner-protocol.md §1–§5).
//!
//! Every call goes through [`Client::send`], which applies the transport conventions of
//! §1 (User-Agent, one `X-Request-Id` per logical call reused by its retries, timeouts)
//! and the HTTP-level retry of §1.1. Endpoint methods then interpret the answer with the
//! exact success code of each call.

pub mod ca;
pub mod classify;
pub mod retry;

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use url::Url;

use crate::protocol::{
    JobOutput, JobRequest, JobResponse, JobState, RegisterRequest, RunnerCredentials, RunnerInfo,
    UnregisterRequest, UpdateJobRequest, VerifyRequest,
};
use crate::secret::Secret;
use classify::{PatchOutcome, UpdateOutcome, classify_patch, classify_update};
use retry::{RetryPolicy, is_retriable_status};

/// Response-header timeout of the runner (§1, §10). Used as the whole-request timeout of
/// small API calls; long-polled job requests fit inside it.
pub const API_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Whole-request timeout of artifact transfers (§10).
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(60 * 60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

pub const HEADER_RUNNER_TOKEN: &str = "RUNNER-TOKEN";
pub const HEADER_JOB_TOKEN: &str = "JOB-TOKEN";
pub const HEADER_REQUEST_ID: &str = "X-Request-Id";
pub const HEADER_LAST_UPDATE: &str = "X-GitLab-Last-Update";
pub const HEADER_JOB_STATUS: &str = "Job-Status";
pub const HEADER_UPDATE_INTERVAL: &str = "X-GitLab-Trace-Update-Interval";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid GitLab URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    #[error("request failed: {0}")]
    Transport(#[source] reqwest::Error),
    #[error("unexpected answer {status}")]
    Status { status: u16 },
    #[error("answer is not the expected JSON: {0}")]
    BadJson(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cannot use the CA file {}: {reason}", path.display())]
    CaFile {
        path: std::path::PathBuf,
        reason: String,
    },
}

impl ClientError {
    /// Transport errors carry the request URL; strip it so that presigned download URLs
    /// never end up in logs.
    pub fn transport(err: reqwest::Error) -> Self {
        ClientError::Transport(err.without_url())
    }
}

/// Result of `POST /jobs/request` as the runner sees it (§3.2).
#[derive(Debug)]
pub enum JobRequestOutcome {
    Job(Box<JobResponse>),
    /// 204, or a 201 that is not JSON / does not decode (job silently dropped).
    NoJob,
    /// 403: the runner waits 300 s in run-single.
    Unhealthy,
    /// Anything else, including transport errors (healthy).
    Failed(String),
}

/// Result of `POST /runners/verify` (§2).
#[derive(Debug)]
pub enum VerifyOutcome {
    Valid(RunnerCredentials),
    /// 403: "is not valid" / "is removed".
    Invalid,
    Error(ClientError),
}

/// The runner's HTTP client for one (url, token) pair.
pub struct Client {
    base: Url,
    http: reqwest::Client,
    http_no_redirect: reqwest::Client,
    policy: RetryPolicy,
    last_update: Mutex<Option<String>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// `<name> <version> (<branch>; <toolchain>; <os>/<arch>)`, the runner's format (§1).
pub fn user_agent() -> String {
    format!(
        "{} {} ({}; rust; {}/{})",
        crate::NAME,
        crate::VERSION,
        option_env!("SIDECAR_BRANCH").unwrap_or("unknown"),
        std::env::consts::OS,
        crate::protocol::go_arch(std::env::consts::ARCH)
    )
}

/// Base API URL from the configured GitLab URL (§1, `fixCIURL`): trailing `/` and `/ci`
/// stripped, `/api/v4/` appended, sub-paths kept; http(s) only.
pub fn api_base(url: &str) -> Result<Url, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let mut trimmed = url.trim().trim_end_matches('/');
    if let Some(stripped) = trimmed.strip_suffix("/ci") {
        trimmed = stripped.trim_end_matches('/');
    }
    let parsed = Url::parse(&format!("{trimmed}/api/v4/")).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("only http and https are supported"));
    }
    if parsed.host_str().is_none() {
        return Err(invalid("no host"));
    }
    Ok(parsed)
}

fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn is_json(response: &Response) -> bool {
    header(response.headers(), CONTENT_TYPE.as_str())
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|mt| mt.trim().eq_ignore_ascii_case("application/json"))
}

impl Client {
    pub fn new(url: &str) -> Result<Self, ClientError> {
        Self::with_policy(url, RetryPolicy::default())
    }

    pub fn with_policy(url: &str, policy: RetryPolicy) -> Result<Self, ClientError> {
        Self::build(url, policy, None)
    }

    /// A client that also trusts the CA certificates of `ca` (`--tls-ca-file`).
    pub fn with_ca(url: &str, ca: Option<&ca::CaBundle>) -> Result<Self, ClientError> {
        Self::build(url, RetryPolicy::default(), ca)
    }

    fn build(
        url: &str,
        policy: RetryPolicy,
        ca: Option<&ca::CaBundle>,
    ) -> Result<Self, ClientError> {
        let base = api_base(url)?;
        let extra_roots = match ca {
            Some(ca) => ca.certificates()?,
            None => Vec::new(),
        };
        let builder = || {
            reqwest::Client::builder()
                .user_agent(user_agent())
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(TRANSFER_TIMEOUT)
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .tcp_keepalive(Duration::from_secs(30))
                .tls_certs_merge(extra_roots.clone())
        };
        let http = builder()
            .redirect(reqwest::redirect::Policy::limited(10))
            .build()
            .map_err(ClientError::Build)?;
        let http_no_redirect = builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(ClientError::Build)?;
        Ok(Self {
            base,
            http,
            http_no_redirect,
            policy,
            last_update: Mutex::new(None),
        })
    }

    /// The `/api/v4/` base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    pub fn endpoint(&self, path: &str) -> Result<Url, ClientError> {
        self.base.join(path).map_err(|e| ClientError::InvalidUrl {
            url: path.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The last `X-GitLab-Last-Update` received (§3.3).
    pub fn last_update(&self) -> Option<String> {
        self.last_update.lock().ok().and_then(|g| g.clone())
    }

    fn remember_last_update(&self, response: &Response) {
        if let Some(value) = header(response.headers(), HEADER_LAST_UPDATE)
            && !value.is_empty()
            && let Ok(mut guard) = self.last_update.lock()
        {
            *guard = Some(value.to_owned());
        }
    }

    /// Send one logical call: `build` makes a fresh request for every attempt (bodies are
    /// regenerated), all attempts share one `X-Request-Id`. Retriable statuses are retried
    /// up to the policy's attempt count, after which the last answer is returned;
    /// transport errors are returned at once (§1.1).
    pub async fn send<F>(
        &self,
        method: Method,
        url: Url,
        timeout: Duration,
        follow_redirects: bool,
        build: F,
    ) -> Result<Response, ClientError>
    where
        F: Fn(RequestBuilder) -> Result<RequestBuilder, ClientError>,
    {
        let http = if follow_redirects {
            &self.http
        } else {
            &self.http_no_redirect
        };
        let request_id = new_request_id();
        let mut attempt = 1;
        loop {
            let request = http
                .request(method.clone(), url.clone())
                .header(HEADER_REQUEST_ID, &request_id)
                .timeout(timeout);
            let response = build(request)?
                .send()
                .await
                .map_err(ClientError::transport)?;
            let status = response.status().as_u16();
            tracing::debug!(%method, path = url.path(), status, attempt, request_id = %request_id, "API call answered");
            if !is_retriable_status(status) || attempt >= self.policy.max_attempts {
                return Ok(response);
            }
            let wait = self.policy.wait(
                attempt,
                header(response.headers(), "RateLimit-ResetTime"),
                header(response.headers(), "Retry-After"),
                SystemTime::now(),
                rand::random::<f64>(),
            );
            tracing::debug!(
                %method, path = url.path(), status, attempt, wait_ms = wait.as_millis() as u64,
                request_id = %request_id, "retrying API call"
            );
            drop(response);
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// POST/PUT/DELETE a JSON body with the runner token in header and body.
    async fn json_call<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        runner_token: Option<&str>,
        body: &B,
        expect_json: bool,
    ) -> Result<Response, ClientError> {
        let url = self.endpoint(path)?;
        let body = serde_json::to_vec(body).map_err(|e| ClientError::BadJson(e.to_string()))?;
        let response = self
            .send(method, url, API_TIMEOUT, true, |rb| {
                let mut rb = rb
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.clone());
                if expect_json {
                    rb = rb.header(ACCEPT, "application/json");
                }
                if let Some(token) = runner_token {
                    rb = rb.header(HEADER_RUNNER_TOKEN, token);
                }
                Ok(rb)
            })
            .await?;
        self.remember_last_update(&response);
        Ok(response)
    }

    async fn decode<T: serde::de::DeserializeOwned>(response: Response) -> Result<T, ClientError> {
        if !is_json(&response) {
            return Err(ClientError::BadJson(
                "content type is not application/json".into(),
            ));
        }
        let bytes = response.bytes().await.map_err(ClientError::transport)?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadJson(e.to_string()))
    }

    /// `POST /runners` with a legacy registration token (§2). Success is 201 only.
    pub async fn register(
        &self,
        registration_token: &Secret,
        description: &str,
        info: &RunnerInfo,
    ) -> Result<RunnerCredentials, ClientError> {
        let body = RegisterRequest {
            description,
            // Without tags the runner registers as run-untagged (GitLab rejects an empty
            // tag list otherwise); locked defaults to true like `gitlab-runner register`.
            run_untagged: true,
            locked: true,
            paused: false,
            info,
            token: registration_token,
        };
        let token = Some(registration_token.expose());
        let response = self
            .json_call(Method::POST, "runners", token, &body, true)
            .await?;
        match response.status() {
            StatusCode::CREATED => Self::decode(response).await,
            status => Err(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }

    /// `POST /runners/verify` (§2).
    pub async fn verify(
        &self,
        token: &Secret,
        system_id: &str,
        info: &RunnerInfo,
    ) -> VerifyOutcome {
        let body = VerifyRequest {
            info,
            token,
            system_id,
        };
        let result = self
            .json_call(
                Method::POST,
                "runners/verify",
                Some(token.expose()),
                &body,
                true,
            )
            .await;
        let response = match result {
            Ok(r) => r,
            Err(e) => return VerifyOutcome::Error(e),
        };
        match response.status() {
            StatusCode::OK if is_json(&response) => match Self::decode(response).await {
                Ok(creds) => VerifyOutcome::Valid(creds),
                Err(e) => VerifyOutcome::Error(e),
            },
            // Old GitLab answered a plain "200": valid, but without an id.
            StatusCode::OK => VerifyOutcome::Valid(RunnerCredentials {
                id: 0,
                token: token.clone(),
                token_expires_at: None,
            }),
            StatusCode::FORBIDDEN => VerifyOutcome::Invalid,
            status => VerifyOutcome::Error(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }

    /// `DELETE /runners` (legacy tokens) or `DELETE /runners/managers` (`glrt-` tokens with a
    /// system id), §2. Success is 204 only.
    pub async fn unregister(
        &self,
        token: &Secret,
        system_id: Option<&str>,
    ) -> Result<(), ClientError> {
        let path = if system_id.is_some() {
            "runners/managers"
        } else {
            "runners"
        };
        let body = UnregisterRequest { token, system_id };
        let response = self
            .json_call(Method::DELETE, path, Some(token.expose()), &body, false)
            .await?;
        match response.status() {
            StatusCode::NO_CONTENT => Ok(()),
            status => Err(ClientError::Status {
                status: status.as_u16(),
            }),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_normalisation() {
        let b = |u| api_base(u).unwrap().to_string();
        assert_eq!(b("https://gitlab.com"), "https://gitlab.com/api/v4/");
        assert_eq!(b("https://gitlab.com/"), "https://gitlab.com/api/v4/");
        assert_eq!(b("https://gitlab.com/ci"), "https://gitlab.com/api/v4/");
        assert_eq!(b("https://gitlab.com/ci/"), "https://gitlab.com/api/v4/");
        assert_eq!(b("https://h/gitlab"), "https://h/gitlab/api/v4/");
        assert_eq!(b("http://127.0.0.1:8080"), "http://127.0.0.1:8080/api/v4/");
        assert!(api_base("ftp://h").is_err());
        assert!(api_base("not a url").is_err());
    }

    #[test]
    fn user_agent_format() {
        let ua = user_agent();
        assert!(
            ua.starts_with(&format!("sidecar {} (", crate::VERSION)),
            "{ua}"
        );
        assert!(
            ua.ends_with(&format!(
                "; rust; {}/{})",
                std::env::consts::OS,
                crate::protocol::go_arch(std::env::consts::ARCH)
            )),
            "{ua}"
        );
    }

    #[test]
    fn request_ids_are_32_hex() {
        let id = new_request_id();
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(id, new_request_id());
    }
}
