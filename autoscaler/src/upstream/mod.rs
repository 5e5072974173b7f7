//! The edge towards GitLab: the autoscaler acting as a runner.
//!
//! [`Upstream`] has one real implementation ([`HttpUpstream`], reqwest) and a scripted fake for
//! tests of the layers above. Only this module knows how to reach GitLab; only this module ever
//! sends a pool's runner token.

mod headers;
mod http;
mod metered;

#[cfg(test)]
pub mod fake;

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

pub use self::headers::{filter_request_headers, filter_response_headers, range_end, retry_after};
pub use self::http::HttpUpstream;
pub use self::metered::{MeteredUpstream, Origin, endpoint};
use crate::secret::Secret;

/// A body streamed in either direction.
pub type ByteStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("GitLab could not be reached: {0}")]
    Transport(String),
    #[error("GitLab did not answer within {0:?}")]
    Timeout(Duration),
}

/// What a `POST /api/v4/jobs/request` came back with.
#[derive(Debug)]
pub enum JobRequestOutcome {
    /// `201` with a JSON job: the payload exactly as received.
    Job { payload: Bytes },
    /// `204`. `last_update` is GitLab's `X-GitLab-Last-Update`, absent when Workhorse ended a
    /// long poll.
    NoJob { last_update: Option<String> },
    /// `403`, or `422 Runner is orphaned`: GitLab will not give this runner jobs (token not
    /// valid, or a runner without project or group); `reason` is what GitLab said.
    Forbidden { reason: String },
    /// `409`: another request of this runner is being served; a runner asks again at once.
    Conflict,
    /// `429`, `5xx` and the like: ask again later, after `retry_after` if GitLab said.
    RetryLater {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Anything else (including a `201` that is not JSON, which GitLab never sends).
    Unexpected { status: u16, detail: String },
}

/// What `POST /api/v4/runners/verify` said about a runner token.
#[derive(Debug, PartialEq, Eq)]
pub enum VerifyOutcome {
    Valid,
    /// `403`: GitLab does not know the token.
    Invalid,
    Unexpected {
        status: u16,
    },
}

/// The job request the autoscaler sends for a pool.
#[derive(Debug)]
pub struct JobRequest {
    pub token: Secret,
    pub system_id: String,
    /// The runner `info` block (with the pool's common features).
    pub info: serde_json::Value,
    pub last_update: Option<String>,
}

/// A sidecar's job call, to be relayed as is.
#[derive(Debug)]
pub struct Forward {
    pub method: ::http::Method,
    /// Path below GitLab's base URL, starting `/api/v4/`.
    pub path: String,
    pub query: Option<String>,
    /// Already filtered: no runner token can be in here.
    pub headers: ::http::HeaderMap,
    pub body: ForwardBody,
    pub timeout: Duration,
}

pub enum ForwardBody {
    Empty,
    Bytes(Bytes),
    Stream(ByteStream),
}

impl std::fmt::Debug for ForwardBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardBody::Empty => f.write_str("Empty"),
            ForwardBody::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            ForwardBody::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// GitLab's answer to a relayed call, with its body still streaming.
pub struct Forwarded {
    pub status: ::http::StatusCode,
    /// GitLab's headers as received; the relay passes on only those a runner reads.
    pub headers: ::http::HeaderMap,
    pub body: ByteStream,
}

impl std::fmt::Debug for Forwarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarded")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// GitLab, as seen by the autoscaler.
pub trait Upstream: Send + Sync + std::fmt::Debug + 'static {
    /// `POST /runners/verify` with the runner's `info`: GitLab records it for the runner
    /// manager, and reads from its `features` whether jobs can be canceled gracefully
    /// (runner-protocol.md §2).
    fn verify(
        &self,
        token: &Secret,
        system_id: &str,
        info: &serde_json::Value,
    ) -> BoxFuture<'_, Result<VerifyOutcome, UpstreamError>>;
    fn request_job(
        &self,
        request: JobRequest,
    ) -> BoxFuture<'_, Result<JobRequestOutcome, UpstreamError>>;
    fn forward(&self, call: Forward) -> BoxFuture<'_, Result<Forwarded, UpstreamError>>;
}
