//! HTTP client for GitLab's runner API (runner-protocol.md §1–§5).
//!
//! Every call goes through [`Client::send`], which applies the transport conventions of
//! §1 (User-Agent, one `X-Request-Id` per logical call reused by its retries, timeouts)
//! and the HTTP-level retry of §1.1. Endpoint methods then interpret the answer with the
//! exact success code of each call: `runners` has the §2 calls, `jobs` the §3–§5 ones,
//! `transport` builds and sends the requests.

pub mod ca;
pub mod classify;
mod jobs;
pub mod retry;
mod runners;
mod transport;

use std::sync::Mutex;
use std::time::Duration;

use url::Url;

use crate::protocol::{JobResponse, RunnerCredentials};
use retry::RetryPolicy;

pub use transport::{api_base, user_agent};

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
