//! A runner built on the `gitlab-runner` crate from crates.io (Collabora's gitlab-runner-rs),
//! written outside this project. The end-to-end tests attach it as a sidecar to show that a
//! runner implementation we did not write works through the autoscaler.
//!
//! Usage: `crate-runner URL TOKEN [MAX_CONCURRENT_JOBS]`. Each script line runs with `sh -c` in
//! the job's build directory; its output goes to the job log.

use anyhow::{Context, Result};
use gitlab_runner::job::Job;
use gitlab_runner::{GitlabLayer, JobHandler, JobResult, Phase, RunnerBuilder, outputln};
use tracing_subscriber::prelude::*;

struct Shell {
    job: Job,
}

#[async_trait::async_trait]
impl JobHandler for Shell {
    async fn step(&mut self, script: &[String], phase: Phase) -> JobResult {
        outputln!("Running {:?} with the gitlab-runner crate", phase);
        for line in script {
            outputln!("$ {}", line);
            let output = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(line)
                .current_dir(self.job.build_dir())
                .output()
                .await
                .map_err(|e| {
                    outputln!("cannot start sh: {}", e);
                })?;
            self.job.trace(&output.stdout);
            self.job.trace(&output.stderr);
            if !output.status.success() {
                outputln!("command failed: {}", output.status);
                return Err(());
            }
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .context("usage: crate-runner URL TOKEN [MAX_CONCURRENT_JOBS]")?;
    let token = args.next().context("missing TOKEN")?;
    let max: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(1);
    let (layer, jobs) = GitlabLayer::new();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "warn".into()),
                ),
        )
        .with(layer)
        .init();
    let builds = tempfile::tempdir()?;
    let mut runner = RunnerBuilder::new(url::Url::parse(&url)?, token, builds.path(), jobs)
        .build()
        .await;
    runner
        .run(|job| async move { Ok(Shell { job }) }, max)
        .await
        .context("runner stopped")
}
