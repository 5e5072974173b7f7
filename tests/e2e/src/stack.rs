//! The pieces of a running system, each a real process on a loopback port: the fake GitLab, the
//! autoscaler (with its admin API), and sidecars (the built-in one, or any other runner binary).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use fake_gitlab::control::Client;
use tokio::process::Command;

pub use crate::pool_spec::PoolSpec;
use crate::ports;
pub use crate::process::repo_root;
use crate::process::{Proc, binary};
pub use sidecar::{Sidecar, register_sidecar};
pub use system::System;

mod admin;
mod sidecar;
mod system;

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
        Self::start_trusting(args, &[]).await
    }

    /// [`FakeGitLab::start`] for a fake serving TLS (`--tls-cert`, `--tls-key` in `args`): its
    /// control client trusts the PEM CA certificates `ca_pem`.
    pub async fn start_trusting(args: &[&str], ca_pem: &[u8]) -> Result<Self> {
        let mut command = Command::new(binary("fake-gitlab")?);
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        let (proc, url) = Proc::spawn_listening("fake-gitlab", command).await?;
        let control = Client::with_ca(url.clone(), ca_pem);
        Ok(Self { proc, url, control })
    }

    /// Waits until job `id` has a trace: its runner started it on a machine. (Where GitLab runs
    /// jobs from hand-out, `running` says only that the autoscaler took the job.)
    pub async fn wait_started(&self, id: u64, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let view = self.control.job(id).await?;
            if view.trace_bytes > 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("job {id} never started on a machine: {view:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Makes `token` a runner token GitLab knows (a pool's upstream token).
    pub async fn add_runner(&self, token: &str) -> Result<()> {
        self.control.add_runner(token).await?;
        Ok(())
    }
}

/// The autoscaler, as a process, with its configuration and state in `dir`.
#[derive(Debug)]
pub struct Autoscaler {
    pub proc: Proc,
    pub url: String,
    /// The admin API (machines, pools).
    pub admin_url: String,
    /// The admin API's bearer token, when the configuration sets one.
    pub admin_token: Option<String>,
    pub dir: PathBuf,
    config_path: PathBuf,
    /// Environment variables of the process (kept for restarts).
    env: Vec<(String, String)>,
    /// A command the autoscaler runs under (e.g. `strace` and its options), kept for restarts.
    wrap: Vec<String>,
    log_file: Option<PathBuf>,
}

/// Extra keys of the autoscaler's `[server]` and `[upstream]` tables (TOML lines), extra
/// environment variables of its process, and a command to run it under (`wrap`: program and
/// options, the autoscaler's command line follows).
#[derive(Debug, Clone, Default)]
pub struct Extra<'a> {
    pub server: &'a str,
    pub upstream: &'a str,
    pub env: &'a [(&'a str, &'a str)],
    pub wrap: &'a [&'a str],
    /// A bearer token for the admin API (written to a file named by `[admin] token_file`).
    pub admin_token: Option<&'a str>,
    /// Extra keys of `[admin]` (TOML lines).
    pub admin: &'a str,
    /// Where the autoscaler's log goes (stderr of the test by default), at debug level.
    pub log_file: Option<&'a Path>,
}

impl Autoscaler {
    /// Writes a configuration for `pools` talking to `gitlab_url` into `dir` and starts
    /// `autoscaler run` on free ports. `server_extra` is appended to the `[server]` table.
    pub async fn start(
        dir: &Path,
        gitlab_url: &str,
        pools: &[PoolSpec],
        server_extra: &str,
    ) -> Result<Self> {
        let extra = Extra {
            server: server_extra,
            ..Extra::default()
        };
        Self::start_with(dir, gitlab_url, pools, &extra).await
    }

    /// [`Autoscaler::start`] with extra environment variables for the process (e.g.
    /// `SSL_CERT_FILE`, which decides the CA certificates it trusts for GitLab).
    pub async fn start_with_env(
        dir: &Path,
        gitlab_url: &str,
        pools: &[PoolSpec],
        server_extra: &str,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let extra = Extra {
            server: server_extra,
            env,
            ..Extra::default()
        };
        Self::start_with(dir, gitlab_url, pools, &extra).await
    }

    /// [`Autoscaler::start`] with extra keys for `[server]` and `[upstream]` and extra
    /// environment variables.
    pub async fn start_with(
        dir: &Path,
        gitlab_url: &str,
        pools: &[PoolSpec],
        extra: &Extra<'_>,
    ) -> Result<Self> {
        let env: Vec<(String, String)> = extra
            .env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        if pools.iter().any(PoolSpec::makes_local_machines) {
            crate::pool_spec::require_sshd()?;
        }
        std::fs::create_dir_all(dir)?;
        if let Some(token) = extra.admin_token {
            std::fs::write(dir.join("admin.token"), format!("{token}\n"))?;
        }
        let config_path = dir.join("autoscaler.toml");
        let wrap: Vec<String> = extra.wrap.iter().map(|s| (*s).to_string()).collect();
        let log_file = extra.log_file.map(Path::to_path_buf);
        // Fixed ports below the ephemeral range, which restarts keep, as a real deployment
        // does (sidecars know this URL); see `ports`. Another test may take a port between
        // the check and the bind: then the start is tried again on new ones.
        let mut attempts = 0;
        let (proc, url, admin_url) = loop {
            let [api, admin] = ports::two_below_ephemeral_range()?;
            let (listen, admin_listen) = (format!("127.0.0.1:{api}"), format!("127.0.0.1:{admin}"));
            std::fs::write(
                &config_path,
                config_toml(&listen, &admin_listen, gitlab_url, pools, extra),
            )?;
            match spawn_autoscaler(&config_path, &env, &wrap, log_file.as_deref()).await {
                Ok(started) => break started,
                Err(e) if attempts < 3 && !(ports::is_free(api) && ports::is_free(admin)) => {
                    attempts += 1;
                    eprintln!(
                        "port {api} or {admin} was taken before the autoscaler bound it: {e:#}"
                    );
                }
                Err(e) => return Err(e),
            }
        };
        Ok(Self {
            proc,
            url,
            admin_url,
            admin_token: extra.admin_token.map(str::to_string),
            dir: dir.to_path_buf(),
            config_path,
            env,
            wrap,
            log_file,
        })
    }

    /// Runs later restarts without the command the autoscaler was wrapped in (e.g. `strace`).
    pub fn unwrap_command(&mut self) {
        self.wrap.clear();
    }

    /// Starts the autoscaler again on the same configuration, state and ports.
    pub async fn restart(&mut self) -> Result<()> {
        if self.proc.try_status().is_none() {
            bail!("the autoscaler is still running");
        }
        let (proc, url, _) = spawn_autoscaler(
            &self.config_path,
            &self.env,
            &self.wrap,
            self.log_file.as_deref(),
        )
        .await?;
        if url != self.url {
            bail!("restarted on {url}, expected {}", self.url);
        }
        self.proc = proc;
        Ok(())
    }
}

async fn spawn_autoscaler(
    config_path: &Path,
    env: &[(String, String)],
    wrap: &[String],
    log_file: Option<&Path>,
) -> Result<(Proc, String, String)> {
    let mut command = match wrap.split_first() {
        Some((program, options)) => {
            let mut c = Command::new(program);
            c.args(options).arg(binary("autoscaler")?);
            c
        }
        None => Command::new(binary("autoscaler")?),
    };
    command.arg("run").arg("--config").arg(config_path);
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let (proc, mut urls) = match log_file {
        Some(path) => {
            command.env("RUST_LOG", "debug");
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            Proc::spawn_announcing_logging("autoscaler", command, 2, file.into()).await?
        }
        None => {
            if std::env::var_os("RUST_LOG").is_none() {
                command.env("RUST_LOG", "autoscaler=info,warn");
            }
            Proc::spawn_announcing("autoscaler", command, 2).await?
        }
    };
    let admin = urls.remove(1);
    let api = urls.remove(0);
    Ok((proc, api, admin))
}

fn config_toml(
    listen: &str,
    admin: &str,
    gitlab_url: &str,
    pools: &[PoolSpec],
    extra: &Extra<'_>,
) -> String {
    let (server_extra, upstream_extra) = (extra.server, extra.upstream);
    let token = if extra.admin_token.is_some() {
        "token_file = \"admin.token\""
    } else {
        ""
    };
    let admin_extra = format!("{token}\n{}", extra.admin);
    let mut toml = format!(
        "[server]\nlisten = \"{listen}\"\n{server_extra}\n\n[admin]\nlisten = \"{admin}\"\n{admin_extra}\n\n\
         [state]\ndir = \"state\"\n\n[upstream]\nurl = \"{gitlab_url}\"\n{upstream_extra}\n\n"
    );
    for p in pools {
        toml.push_str(&format!(
            "[[pools]]\nname = \"{}\"\nupstream_token = \"{}\"\nregistration_token = \"{}\"\nrequest_concurrency = {}\n{}\n\n",
            p.name, p.upstream_token, p.registration_token, p.request_concurrency, p.tail
        ));
    }
    toml
}
