//! Building and sending requests: the two HTTP clients (with and without redirects),
//! API URLs, and [`Client::send`] with its request ids and HTTP-level retry
//! (runner-protocol.md §1, §1.1), plus the JSON helpers the endpoint calls share.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use url::Url;

use super::retry::{RetryPolicy, is_retriable_status};
use super::{
    API_TIMEOUT, CONNECT_TIMEOUT, Client, ClientError, HEADER_LAST_UPDATE, HEADER_REQUEST_ID,
    HEADER_RUNNER_TOKEN, POOL_IDLE_TIMEOUT, TRANSFER_TIMEOUT, ca,
};

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

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn is_json(response: &Response) -> bool {
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

    pub(super) fn remember_last_update(&self, response: &Response) {
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
    pub(super) async fn json_call<B: Serialize>(
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

    pub(super) async fn decode<T: serde::de::DeserializeOwned>(
        response: Response,
    ) -> Result<T, ClientError> {
        if !is_json(&response) {
            return Err(ClientError::BadJson(
                "content type is not application/json".into(),
            ));
        }
        let bytes = response.bytes().await.map_err(ClientError::transport)?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadJson(e.to_string()))
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
