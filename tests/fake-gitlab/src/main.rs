//! `fake-gitlab`: GitLab's runner API as a process (see `README.md`).
//!
//! The first stdout line is `listening on http://ADDR` once the socket is bound, so a parent
//! process can wait for it; logs go to stderr.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fake_gitlab::{Config, parse_duration, parse_size};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    name = "fake-gitlab",
    version,
    about = "A stand-in for GitLab's runner API"
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// A runner token to accept (repeatable; more via POST /control/runners).
    #[arg(long = "runner-token")]
    runner_tokens: Vec<String>,
    /// A registration token for POST /api/v4/runners (repeatable; more via
    /// POST /control/registration_tokens).
    #[arg(long = "registration-token")]
    registration_tokens: Vec<String>,
    /// How long a job request with a current `last_update` is held (0 = no long polling).
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    long_poll: Duration,
    /// X-GitLab-Trace-Update-Interval in seconds.
    #[arg(long, default_value = "3", value_parser = parse_duration)]
    trace_update_interval: Duration,
    /// Turn on two-phase job commit (GitLab's feature flag allow_runner_job_acknowledgement).
    #[arg(long)]
    two_phase_commit: bool,
    /// How long a two-phase job waits for its acceptance PUT or a pending keep-alive.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    ack_window: Duration,
    /// Auto-retries (as a new job) of a job failed with runner_provisioning_timeout.
    #[arg(long, default_value = "1")]
    provisioning_retries: u32,
    /// Running jobs are failed (server_timeout_running) this long after their timeout.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    running_timeout_margin: Duration,
    /// Where artifacts are stored (default: a temporary directory removed at exit).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Larger artifact uploads are refused with 413.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    max_artifact_size: u64,
    /// A trace beyond this size fails the job (trace_size_exceeded).
    #[arg(long, default_value = "100MiB", value_parser = parse_size)]
    trace_limit: u64,
    /// Answer artifact downloads with direct_download=true by a 302 to /storage/...
    #[arg(long)]
    artifacts_redirect: bool,
    /// URL jobs see as CI_SERVER_URL (default: the listening URL).
    #[arg(long)]
    external_url: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve this directory's files at /git/... (a bare repository for git's dumb HTTP).
    #[arg(long)]
    git_dir: Option<PathBuf>,
}

impl Cli {
    fn into_config(self) -> Config {
        Config {
            listen: self.listen,
            runner_tokens: self.runner_tokens,
            registration_tokens: self.registration_tokens,
            long_poll: self.long_poll,
            trace_update_interval: self.trace_update_interval,
            two_phase_commit: self.two_phase_commit,
            ack_window: self.ack_window,
            provisioning_retries: self.provisioning_retries,
            running_timeout_margin: self.running_timeout_margin,
            data_dir: self.data_dir,
            max_artifact_size: self.max_artifact_size,
            trace_limit: self.trace_limit,
            artifacts_redirect: self.artifacts_redirect,
            external_url: self.external_url,
            tls_cert: self.tls_cert,
            tls_key: self.tls_key,
            git_dir: self.git_dir,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = Cli::parse().into_config();

    let server = fake_gitlab::start(config).await?;
    {
        let mut stdout = std::io::stdout().lock();
        let scheme = server.url().split("://").next().unwrap_or("http");
        writeln!(stdout, "listening on {scheme}://{}", server.addr())
            .context("writing to stdout")?;
        stdout.flush().context("flushing stdout")?;
    }

    wait_for_signal().await?;
    tracing::info!("signal received, shutting down");
    server.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
