//! The autoscaler's admin API as the tests use it: its health, machines and pools.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};

use super::Autoscaler;

impl Autoscaler {
    /// Waits until the autoscaler reports that its graceful shutdown began (`/healthz` 503).
    pub async fn wait_draining(&self, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let status = self.admin_get("/healthz").send().await?.status();
            if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the autoscaler did not start draining within {within:?} (healthz {status})");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A request to the admin API, with its token when there is one.
    pub fn admin_request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = reqwest::Client::new().request(method, format!("{}{path}", self.admin_url));
        match &self.admin_token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub fn admin_get(&self, path: &str) -> reqwest::RequestBuilder {
        self.admin_request(reqwest::Method::GET, path)
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The machines the autoscaler knows (all pools), from its admin API.
    pub async fn machines(&self) -> Result<Vec<autoscaler::store::MachineRecord>> {
        Ok(self
            .admin_get("/machines")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Waits until `done` holds for the machines (all pools), awaiting each change through the
    /// admin API's long poll; fails with the last list after `within`.
    pub async fn wait_machines(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[autoscaler::store::MachineRecord]) -> bool,
    ) -> Result<Vec<autoscaler::store::MachineRecord>> {
        let deadline = tokio::time::Instant::now() + within;
        let mut after: Option<u64> = None;
        loop {
            let path = match after {
                None => "/machines".to_string(),
                Some(v) => format!("/machines?after={v}&timeout_ms=5000"),
            };
            let response = self.admin_get(&path).send().await?.error_for_status()?;
            let version = response
                .headers()
                .get("x-version")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let list: Vec<autoscaler::store::MachineRecord> = response.json().await?;
            if done(&list) {
                return Ok(list);
            }
            if tokio::time::Instant::now() >= deadline {
                let summary: Vec<String> = list
                    .iter()
                    .map(|m| format!("{} {} {:?}", m.id, m.state, m.reason))
                    .collect();
                bail!("{what}: not reached within {within:?}; machines: {summary:?}");
            }
            after = Some(version);
        }
    }

    /// The pools' status, from the admin API.
    pub async fn pools(&self) -> Result<Vec<autoscaler::admin::PoolStatus>> {
        Ok(self
            .admin_get("/pools")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}
