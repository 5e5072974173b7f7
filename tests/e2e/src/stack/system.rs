//! The relay's smallest whole system: a fake GitLab, an autoscaler with one pool, and built-in
//! sidecars registered to it directly (no machines), all real processes on loopback ports.

use std::time::Duration;

use anyhow::{Context, Result};
use fake_gitlab::control::{JobSpec, JobView};
use tempfile::TempDir;

use super::{Autoscaler, FakeGitLab, PoolSpec, Sidecar, register_sidecar};

/// A fake GitLab, an autoscaler with one pool, and `n` built-in sidecars registered to it.
#[derive(Debug)]
pub struct System {
    pub gitlab: FakeGitLab,
    pub autoscaler: Autoscaler,
    pub pool: PoolSpec,
    _sidecars: Vec<Sidecar>,
    _dir: TempDir,
}

impl System {
    /// How long a job of the tests may take to end.
    pub const JOB_TIMEOUT: Duration = Duration::from_secs(120);

    /// Starts the fake GitLab with `gitlab_args`, the autoscaler, and `n` sidecars.
    pub async fn start(n: usize, gitlab_args: &[&str]) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let gitlab = FakeGitLab::start(gitlab_args).await?;
        let pool = PoolSpec::new("default");
        gitlab.add_runner(&pool.upstream_token).await?;
        let autoscaler = Autoscaler::start(
            &dir.path().join("autoscaler"),
            &gitlab.url,
            std::slice::from_ref(&pool),
            "long_poll_timeout = \"20s\"",
        )
        .await?;
        let mut sidecars = Vec::new();
        for i in 0..n {
            let token = register_sidecar(
                &autoscaler.url,
                &pool.registration_token,
                &format!("sidecar-{i}"),
            )
            .await?;
            let builds = dir.path().join(format!("builds-{i}"));
            sidecars.push(Sidecar::start(
                &format!("sidecar-{i}"),
                &autoscaler.url,
                &token,
                1,
                &builds,
            )?);
        }
        Ok(System {
            gitlab,
            autoscaler,
            pool,
            _sidecars: sidecars,
            _dir: dir,
        })
    }

    /// A job for the pool running `script`.
    pub fn spec(&self, script: &[&str]) -> JobSpec {
        JobSpec::new(&self.pool.upstream_token, script)
    }

    /// Queues `spec` in GitLab; its job id.
    pub async fn enqueue(&self, spec: &JobSpec) -> Result<u64> {
        Ok(self.gitlab.control.enqueue(spec).await?.id)
    }

    /// Waits for job `id` to end (2 minutes at most); its final view and trace.
    pub async fn finish(&self, id: u64) -> Result<(JobView, String)> {
        let view = self
            .gitlab
            .control
            .wait_final(id, Self::JOB_TIMEOUT)
            .await?;
        let trace = String::from_utf8(self.gitlab.control.trace(id).await?)
            .context("trace is not UTF-8")?;
        Ok((view, trace))
    }
}
