//! A built-in sidecar as a process, and the registration that gives it a token.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use crate::process::{Proc, binary};

/// Registers a sidecar with a pool's registration token, the way `gitlab-runner register`
/// does (`POST /api/v4/runners`), and returns its runner token.
pub async fn register_sidecar(
    autoscaler_url: &str,
    registration_token: &str,
    description: &str,
) -> Result<String> {
    let response = reqwest::Client::new()
        .post(format!("{autoscaler_url}/api/v4/runners"))
        .json(&serde_json::json!({"token": registration_token, "description": description}))
        .send()
        .await?;
    if response.status() != reqwest::StatusCode::CREATED {
        bail!("registration answered {}", response.status());
    }
    let body: serde_json::Value = response.json().await?;
    body["token"]
        .as_str()
        .map(str::to_string)
        .context("registration answer without a token")
}

/// A built-in sidecar process.
#[derive(Debug)]
pub struct Sidecar {
    pub proc: Proc,
}

impl Sidecar {
    /// Starts `sidecar run` against `url` with `token`, running up to `concurrent` jobs at once.
    pub fn start(
        name: &str,
        url: &str,
        token: &str,
        concurrent: u32,
        builds_dir: &Path,
    ) -> Result<Self> {
        let mut command = Command::new(binary("sidecar")?);
        command
            .arg("run")
            .args(["--url", url, "--token", token])
            .args(["--concurrent", &concurrent.to_string()])
            .arg("--builds-dir")
            .arg(builds_dir)
            .args(["--check-interval", "1s"]);
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "warn");
        }
        Ok(Self {
            proc: Proc::spawn(name, command)?,
        })
    }

    pub async fn stop(&mut self) -> Result<()> {
        self.proc.stop(Duration::from_secs(30)).await?;
        Ok(())
    }
}
