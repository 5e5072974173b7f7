//! Every call to GitLab counted and timed, by wrapping the [`Upstream`] edge: the relay gets one
//! wrapper (`origin="relay"`), the intake and the delivery of what the autoscaler owes GitLab
//! another (`origin="autoscaler"`), so that the autoscaler's own calls (job requests,
//! keep-alives, acknowledgements, spooled uploads, final states) show apart from relayed ones.

use std::sync::Arc;
use tokio::time::Instant;

use futures::future::BoxFuture;
use http::Method;

use super::{
    Forward, Forwarded, JobRequest, JobRequestOutcome, Upstream, UpstreamError, VerifyOutcome,
};
use crate::metrics::{Metrics, UpstreamLabels};
use crate::secret::Secret;

/// Who made a call to GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A sidecar's call, passed on.
    Relay,
    /// The autoscaler's own.
    Autoscaler,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Relay => "relay",
            Origin::Autoscaler => "autoscaler",
        }
    }
}

#[derive(Debug)]
pub struct MeteredUpstream {
    inner: Arc<dyn Upstream>,
    metrics: Arc<Metrics>,
    origin: Origin,
}

impl MeteredUpstream {
    pub fn wrap(inner: Arc<dyn Upstream>, metrics: Arc<Metrics>, origin: Origin) -> Arc<Self> {
        Arc::new(Self {
            inner,
            metrics,
            origin,
        })
    }

    fn record(&self, endpoint: &str, outcome: String, started: Instant) {
        self.metrics
            .upstream_requests
            .get_or_create(&UpstreamLabels {
                origin: self.origin.name().to_string(),
                endpoint: endpoint.to_string(),
                outcome,
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

fn error_outcome(e: &UpstreamError) -> String {
    match e {
        UpstreamError::Timeout(_) => "timeout".into(),
        UpstreamError::Transport(_) => "unreachable".into(),
    }
}

/// The endpoint a relayed or delivered call goes to, by method and path.
pub fn endpoint(method: &Method, path: &str) -> &'static str {
    let tail = path
        .trim_start_matches('/')
        .strip_prefix("api/v4/jobs/")
        .and_then(|rest| rest.split_once('/').map(|(_, t)| t).or(Some("")));
    match (method, tail) {
        (&Method::PUT, Some("")) => "job_update",
        (&Method::PATCH, Some("trace")) => "job_trace",
        (&Method::POST, Some("artifacts")) => "artifacts_upload",
        (&Method::GET, Some("artifacts")) => "artifacts_download",
        _ => "other",
    }
}

fn job_request_outcome(outcome: &JobRequestOutcome) -> String {
    match outcome {
        JobRequestOutcome::Job { .. } => "201".into(),
        JobRequestOutcome::NoJob { .. } => "204".into(),
        // The reason starts with GitLab's status (`403 …`, `422 …`).
        JobRequestOutcome::Forbidden { reason } => reason.chars().take(3).collect(),
        JobRequestOutcome::Conflict => "409".into(),
        JobRequestOutcome::RetryLater { status, .. }
        | JobRequestOutcome::Unexpected { status, .. } => status.to_string(),
    }
}

impl Upstream for MeteredUpstream {
    fn verify(
        &self,
        token: &Secret,
        system_id: &str,
        info: &serde_json::Value,
    ) -> BoxFuture<'_, Result<VerifyOutcome, UpstreamError>> {
        let call = self.inner.verify(token, system_id, info);
        Box::pin(async move {
            let started = crate::clock::monotonic();
            let result = call.await;
            let outcome = match &result {
                Ok(VerifyOutcome::Valid) => "200".into(),
                Ok(VerifyOutcome::Invalid) => "403".into(),
                Ok(VerifyOutcome::Unexpected { status }) => status.to_string(),
                Err(e) => error_outcome(e),
            };
            self.record("runner_verify", outcome, started);
            result
        })
    }

    fn request_job(
        &self,
        request: JobRequest,
    ) -> BoxFuture<'_, Result<JobRequestOutcome, UpstreamError>> {
        Box::pin(async move {
            let started = crate::clock::monotonic();
            let result = self.inner.request_job(request).await;
            let outcome = match &result {
                Ok(o) => job_request_outcome(o),
                Err(e) => error_outcome(e),
            };
            self.record("job_request", outcome, started);
            result
        })
    }

    fn forward(&self, call: Forward) -> BoxFuture<'_, Result<Forwarded, UpstreamError>> {
        let endpoint = endpoint(&call.method, &call.path);
        Box::pin(async move {
            let started = crate::clock::monotonic();
            let result = self.inner.forward(call).await;
            let outcome = match &result {
                Ok(f) => f.status.as_u16().to_string(),
                Err(e) => error_outcome(e),
            };
            self.record(endpoint, outcome, started);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_endpoints_are_named_from_method_and_path() {
        assert_eq!(endpoint(&Method::PUT, "/api/v4/jobs/17"), "job_update");
        assert_eq!(
            endpoint(&Method::PATCH, "/api/v4/jobs/17/trace"),
            "job_trace"
        );
        assert_eq!(
            endpoint(&Method::POST, "/api/v4/jobs/17/artifacts"),
            "artifacts_upload"
        );
        assert_eq!(
            endpoint(&Method::GET, "/api/v4/jobs/17/artifacts"),
            "artifacts_download"
        );
        assert_eq!(endpoint(&Method::GET, "/api/v4/other"), "other");
    }
}
