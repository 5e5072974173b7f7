//! The pieces of a running system, each a real process on a loopback port: the fake GitLab, the
//! autoscaler, and sidecars (the built-in one, or any other runner binary).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fake_gitlab::control::Client;
use tokio::process::Command;

use crate::process::{Proc, binary};

/// The fake GitLab, as a process.
#[derive(Debug)]
pub struct FakeGitLab {
    pub proc: Proc,
    pub url: String,
    pub control: Client,
}

impl FakeGitLab {
    /// Starts `fake-gitlab` on a free loopback port with `args` (e.g. `--trace-update-interval 1`).
    pub async fn start(args: &[&str]) -> Result<Self> {
        let mut command = Command::new(binary("fake-gitlab")?);
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        let (proc, url) = Proc::spawn_listening("fake-gitlab", command).await?;
        let control = Client::new(url.clone());
        Ok(Self { proc, url, control })
    }

    /// Makes `token` a runner token GitLab knows (a pool's upstream token).
    pub async fn add_runner(&self, token: &str) -> Result<()> {
        self.control.add_runner(token).await?;
        Ok(())
    }
}

/// One `[[pools]]` entry of the autoscaler's configuration.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub name: String,
    pub upstream_token: String,
    pub registration_token: String,
    pub request_concurrency: u32,
}

impl PoolSpec {
    /// A pool with tokens derived from its name.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            upstream_token: format!("glrt-upstream-{name}-{:08x}", rand_u32()),
            registration_token: format!("reg-{name}-{:08x}", rand_u32()),
            request_concurrency: 4,
        }
    }
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

/// The autoscaler, as a process, with its configuration and state in `dir`.
#[derive(Debug)]
pub struct Autoscaler {
    pub proc: Proc,
    pub url: String,
    pub dir: PathBuf,
    config_path: PathBuf,
}

impl Autoscaler {
    /// Writes a configuration for `pools` talking to `gitlab_url` into `dir` and starts
    /// `autoscaler run` on a free port. `extra` is appended to the `[server]` table.
    pub async fn start(
        dir: &Path,
        gitlab_url: &str,
        pools: &[PoolSpec],
        server_extra: &str,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config_path = dir.join("autoscaler.toml");
        std::fs::write(
            &config_path,
            config_toml("127.0.0.1:0", gitlab_url, pools, server_extra),
        )?;
        let (proc, url) = spawn_autoscaler(&config_path).await?;
        // Later restarts keep the port, as a real deployment does: sidecars know this URL.
        let listen = url.trim_start_matches("http://").to_string();
        std::fs::write(
            &config_path,
            config_toml(&listen, gitlab_url, pools, server_extra),
        )?;
        Ok(Self {
            proc,
            url,
            dir: dir.to_path_buf(),
            config_path,
        })
    }

    /// Starts the autoscaler again on the same configuration, state and port.
    pub async fn restart(&mut self) -> Result<()> {
        if self.proc.try_status().is_none() {
            bail!("the autoscaler is still running");
        }
        let (proc, url) = spawn_autoscaler(&self.config_path).await?;
        if url != self.url {
            bail!("restarted on {url}, expected {}", self.url);
        }
        self.proc = proc;
        Ok(())
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }
}

async fn spawn_autoscaler(config_path: &Path) -> Result<(Proc, String)> {
    let mut command = Command::new(binary("autoscaler")?);
    command.arg("run").arg("--config").arg(config_path);
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "autoscaler=info,warn");
    }
    Proc::spawn_listening("autoscaler", command).await
}

fn config_toml(listen: &str, gitlab_url: &str, pools: &[PoolSpec], server_extra: &str) -> String {
    let mut toml = format!(
        "[server]\nlisten = \"{listen}\"\n{server_extra}\n\n[state]\ndir = \"state\"\n\n\
         [upstream]\nurl = \"{gitlab_url}\"\n\n"
    );
    for p in pools {
        toml.push_str(&format!(
            "[[pools]]\nname = \"{}\"\nupstream_token = \"{}\"\nregistration_token = \"{}\"\nrequest_concurrency = {}\n\n",
            p.name, p.upstream_token, p.registration_token, p.request_concurrency
        ));
    }
    toml
}

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
