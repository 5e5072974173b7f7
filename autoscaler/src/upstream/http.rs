//! [`Upstream`] over HTTP with reqwest.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use http::{HeaderValue, StatusCode};

use super::{
    Forward, ForwardBody, Forwarded, JobRequest, JobRequestOutcome, Upstream, UpstreamError,
    VerifyOutcome, retry_after,
};
use crate::config::UpstreamConfig;
use crate::secret::Secret;

const USER_AGENT: &str = concat!("gitlab-runner-autoscaler/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Clone)]
pub struct HttpUpstream {
    client: reqwest::Client,
    /// GitLab's base URL, always ending in `/` so that joining keeps a sub-path install
    /// (`https://host/gitlab/`) intact.
    base: url::Url,
    call_timeout: Duration,
    job_request_timeout: Duration,
}

impl HttpUpstream {
    pub fn new(config: &UpstreamConfig) -> Result<Self, UpstreamError> {
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .connect_timeout(config.connect_timeout)
            // Redirects are the sidecar's business (artifact downloads may be sent to object
            // storage); the relay passes them through untouched.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90))
            .http1_only()
            .build()
            .map_err(|e| UpstreamError::Transport(format!("cannot build the HTTP client: {e}")))?;
        let mut base = config.url.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Self {
            client,
            base,
            call_timeout: config.call_timeout,
            job_request_timeout: config.job_request_timeout,
        })
    }

    fn url(&self, path: &str, query: Option<&str>) -> Result<url::Url, UpstreamError> {
        let mut url = self
            .base
            .join(path.trim_start_matches('/'))
            .map_err(|e| UpstreamError::Transport(format!("bad upstream path {path:?}: {e}")))?;
        url.set_query(query);
        Ok(url)
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<reqwest::Response, UpstreamError> {
        request
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| classify(e, timeout))
    }
}

fn classify(e: reqwest::Error, timeout: Duration) -> UpstreamError {
    if e.is_timeout() {
        UpstreamError::Timeout(timeout)
    } else {
        // The chain carries the useful part ("connection refused", "dns error").
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        UpstreamError::Transport(message)
    }
}

fn correlation_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

impl Upstream for HttpUpstream {
    fn verify(
        &self,
        token: &Secret,
        system_id: &str,
        info: &serde_json::Value,
    ) -> BoxFuture<'_, Result<VerifyOutcome, UpstreamError>> {
        let body =
            serde_json::json!({"token": token.expose(), "system_id": system_id, "info": info});
        let token = token.clone();
        Box::pin(async move {
            let url = self.url("api/v4/runners/verify", None)?;
            let request = self
                .client
                .post(url)
                .header("RUNNER-TOKEN", token.expose())
                .header("X-Request-Id", correlation_id())
                .header(http::header::ACCEPT, "application/json")
                .json(&body);
            let response = self.send(request, self.call_timeout).await?;
            Ok(match response.status() {
                StatusCode::OK => VerifyOutcome::Valid,
                StatusCode::FORBIDDEN => VerifyOutcome::Invalid,
                other => VerifyOutcome::Unexpected {
                    status: other.as_u16(),
                },
            })
        })
    }

    fn request_job(
        &self,
        request: JobRequest,
    ) -> BoxFuture<'_, Result<JobRequestOutcome, UpstreamError>> {
        Box::pin(async move {
            let mut body = serde_json::json!({
                "token": request.token.expose(),
                "system_id": request.system_id,
                "info": request.info,
            });
            if let Some(last_update) = &request.last_update {
                body["last_update"] = serde_json::Value::String(last_update.clone());
            }
            let url = self.url("api/v4/jobs/request", None)?;
            let builder = self
                .client
                .post(url)
                .header("RUNNER-TOKEN", request.token.expose())
                .header("X-Request-Id", correlation_id())
                .header(http::header::ACCEPT, "application/json")
                .json(&body);
            let response = self.send(builder, self.job_request_timeout).await?;
            let status = response.status();
            Ok(match status.as_u16() {
                201 if is_json(&response) => {
                    let payload = response
                        .bytes()
                        .await
                        .map_err(|e| classify(e, self.job_request_timeout))?;
                    JobRequestOutcome::Job { payload }
                }
                204 => JobRequestOutcome::NoJob {
                    last_update: response
                        .headers()
                        .get("x-gitlab-last-update")
                        .and_then(|v| v.to_str().ok())
                        .filter(|v| !v.is_empty())
                        .map(str::to_string),
                },
                403 | 422 => JobRequestOutcome::Forbidden {
                    reason: refusal(status.as_u16(), response).await,
                },
                409 => JobRequestOutcome::Conflict,
                408 | 429 | 500..=599 => JobRequestOutcome::RetryLater {
                    status: status.as_u16(),
                    retry_after: retry_after(
                        response.headers(),
                        crate::clock::wall(&crate::clock::SystemClock),
                    ),
                },
                code => JobRequestOutcome::Unexpected {
                    status: code,
                    detail: format!(
                        "content-type {:?}",
                        response.headers().get(http::header::CONTENT_TYPE)
                    ),
                },
            })
        })
    }

    fn forward(&self, call: Forward) -> BoxFuture<'_, Result<Forwarded, UpstreamError>> {
        Box::pin(async move {
            let url = self.url(&call.path, call.query.as_deref())?;
            let mut builder = self.client.request(call.method, url).headers(call.headers);
            builder = match call.body {
                ForwardBody::Empty => builder,
                ForwardBody::Bytes(bytes) => builder.body(bytes),
                ForwardBody::Stream(stream) => builder.body(reqwest::Body::wrap_stream(stream)),
            };
            let response = self.send(builder, call.timeout).await?;
            let status = response.status();
            let mut headers = response.headers().clone();
            if !headers.contains_key(http::header::CONTENT_LENGTH)
                && let Some(len) = response.content_length()
                && let Ok(value) = HeaderValue::from_str(&len.to_string())
            {
                headers.insert(http::header::CONTENT_LENGTH, value);
            }
            let body = response
                .bytes_stream()
                .map_err(std::io::Error::other)
                .map_ok(Bytes::from);
            Ok(Forwarded {
                status,
                headers,
                body: Box::pin(body),
            })
        })
    }
}

/// `"<status> <GitLab's message>"` of a refused job request (the body is small JSON).
async fn refusal(status: u16, response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or(text);
    let message: String = message.chars().take(200).collect();
    format!("{status} {}", message.trim())
}
