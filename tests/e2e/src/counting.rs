//! A pool of built-in sidecars on the counting local provisioner
//! (`fixtures/counting-provisioner`: every machine created and destroyed is logged, so tests
//! count machines exactly; `CREATE_DELAY` makes machines boot slowly; `RECLAIM_FILE` lists
//! machines the provider reports as being reclaimed), behind a fake GitLab and an autoscaler
//! that confirms waiting jobs every second.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use fake_gitlab::control::{JobSpec, JobStatus};
use tempfile::TempDir;

use crate::LocalMachinesGuard;
use crate::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, repo_root};

/// How long any one wait of a test may take.
pub const WITHIN: Duration = Duration::from_secs(120);

#[derive(Debug)]
pub struct CountingRig {
    pub gitlab: FakeGitLab,
    /// Where the machines live (each machine's directory holds its `sidecar.log`).
    pub machines_root: PathBuf,
    pub autoscaler: Autoscaler,
    pub pool: PoolSpec,
    pub count_log: PathBuf,
    _cleanup: LocalMachinesGuard,
    _dir: TempDir,
}

/// A pool of built-in sidecars on the counting local provisioner. `provisioner` holds extra
/// `[pools.provisioner]` lines; `env` extra provisioner environment.
pub async fn rig(
    gitlab_args: &[&str],
    scaling: &str,
    provisioner: &str,
    env: &[(&str, &str)],
) -> Result<CountingRig> {
    rig_logging(gitlab_args, scaling, provisioner, env, None).await
}

/// [`rig`] with the autoscaler's log (at debug level) written to `log_file`.
pub async fn rig_logging(
    gitlab_args: &[&str],
    scaling: &str,
    provisioner: &str,
    env: &[(&str, &str)],
    log_file: Option<&std::path::Path>,
) -> Result<CountingRig> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let count_log = dir.path().join("machines.log");
    std::fs::write(&count_log, "")?;
    let mut args = vec!["--trace-update-interval", "1"];
    args.extend_from_slice(gitlab_args);
    let gitlab = FakeGitLab::start(&args).await?;
    let mut env_table = format!(
        "LOCAL_ROOT = \"{}\", COUNT_LOG = \"{}\"",
        machines_root.display(),
        count_log.display()
    );
    for (key, value) in env {
        env_table.push_str(&format!(", {key} = \"{value}\""));
    }
    let mut pool = PoolSpec::new("local");
    pool.tail = format!(
        "[pools.provisioner]\ncommand = \"{}\"\nenv = {{ {env_table} }}\nreconcile_interval = \"1s\"\n{provisioner}\n\n\
         [pools.scaling]\n{scaling}\n\n[pools.sidecar]\nmode = \"builtin\"\nready_timeout = \"60s\"\n",
        repo_root()
            .join("tests/e2e/fixtures/counting-provisioner")
            .display(),
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    // The admin API asks for a token here, so every test on this rig goes through its check.
    let admin_token = format!("admin-{:016x}", rand::random::<u64>());
    let extra = Extra {
        server: "long_poll_timeout = \"10s\"",
        upstream: "keepalive_interval = \"1s\"",
        admin_token: Some(&admin_token),
        log_file,
        ..Extra::default()
    };
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &extra,
    )
    .await?;
    Ok(CountingRig {
        machines_root: machines_root.clone(),
        gitlab,
        autoscaler,
        pool,
        count_log,
        _cleanup: LocalMachinesGuard {
            root: machines_root,
        },
        _dir: dir,
    })
}

impl CountingRig {
    pub async fn enqueue(&self, spec: JobSpec) -> Result<u64> {
        Ok(self.gitlab.control.enqueue(&spec).await?.id)
    }

    pub fn job(&self, script: &[&str]) -> JobSpec {
        JobSpec::new(&self.pool.upstream_token, script)
    }

    /// Waits until GitLab has handed the job out (running, or pending for acknowledgement).
    pub async fn wait_taken(&self, id: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let view = self.gitlab.control.job(id).await?;
            if view.status != JobStatus::Pending {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("job {id} was never handed out: {view:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the job's runner has sent its first trace (it is running on a machine).
    pub async fn wait_started(&self, id: u64) -> Result<()> {
        self.gitlab.wait_started(id, WITHIN).await
    }

    pub async fn trace(&self, id: u64) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.gitlab.control.trace(id).await?).into_owned())
    }

    /// Machines the provisioner created, from its own log.
    pub fn created(&self) -> Result<usize> {
        let log = std::fs::read_to_string(&self.count_log)?;
        Ok(log.lines().filter(|l| l.starts_with("create ")).count())
    }

    /// Waits until the autoscaler's pool view satisfies `check` (the admin API has no long
    /// poll for pools; it is asked every 100 ms until the deadline).
    pub async fn wait_pool(
        &self,
        what: &str,
        within: Duration,
        check: impl Fn(&autoscaler::admin::PoolStatus) -> bool,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let pools = self.autoscaler.pools().await?;
            if pools.iter().any(&check) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{what}: not reached; pools {pools:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
