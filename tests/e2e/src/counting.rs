//! A pool of built-in sidecars on the counting local provisioner
//! (`fixtures/counting-provisioner`: every machine created and destroyed is logged, so tests
//! count machines exactly; `CREATE_DELAY` makes machines boot slowly; `RECLAIM_FILE` lists
//! machines the provider reports as being reclaimed), behind a fake GitLab and an autoscaler
//! that confirms waiting jobs every second.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use autoscaler::core::machine::MachineState;
use autoscaler::store::MachineRecord;
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

/// The `[pools.sidecar]` lines of [`rig`]: the built-in sidecar, a minute to its first poll.
pub const BUILTIN_SIDECAR: &str = "mode = \"builtin\"\nready_timeout = \"60s\"";

/// [`rig`] with the autoscaler's log (at debug level) written to `log_file`.
pub async fn rig_logging(
    gitlab_args: &[&str],
    scaling: &str,
    provisioner: &str,
    env: &[(&str, &str)],
    log_file: Option<&std::path::Path>,
) -> Result<CountingRig> {
    rig_with_sidecar(
        gitlab_args,
        (scaling, provisioner, BUILTIN_SIDECAR),
        env,
        log_file,
    )
    .await
}

/// [`rig_logging`] with the pool's `[pools.scaling]`, `[pools.provisioner]` (extra) and
/// `[pools.sidecar]` lines given.
pub async fn rig_with_sidecar(
    gitlab_args: &[&str],
    (scaling, provisioner, sidecar): (&str, &str, &str),
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
         [pools.scaling]\n{scaling}\n\n[pools.sidecar]\n{sidecar}\n",
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

/// What the counting provisioner's log says of the machines: every one created, those not
/// destroyed since, and the most that existed at once.
#[derive(Debug, Default)]
pub struct MachineLog {
    pub created: BTreeSet<String>,
    pub alive: BTreeSet<String>,
    pub most: usize,
}

impl MachineLog {
    /// Reads the log at `path` (one `create <id>` or `destroy <id>` a line).
    pub fn read(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let mut log = Self::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("create", id)) => {
                    log.created.insert(id.to_string());
                    log.alive.insert(id.to_string());
                }
                Some(("destroy", id)) => {
                    log.alive.remove(id);
                }
                _ => {}
            }
            log.most = log.most.max(log.alive.len());
        }
        Ok(log)
    }
}

impl CountingRig {
    /// One idle machine, ready: what a pool with `idle_count = 1` keeps.
    pub async fn one_ready_machine(&self) -> Result<MachineRecord> {
        let list = self
            .autoscaler
            .wait_machines(WITHIN, "an idle machine ready", |l| {
                l.iter().any(|m| m.state == MachineState::Ready)
            })
            .await?;
        list.into_iter()
            .find(|m| m.state == MachineState::Ready)
            .context("no ready machine")
    }

    pub async fn enqueue(&self, spec: JobSpec) -> Result<u64> {
        Ok(self.gitlab.control.enqueue(&spec).await?.id)
    }

    pub fn job(&self, script: &[&str]) -> JobSpec {
        JobSpec::new(&self.pool.upstream_token, script)
    }

    /// Enqueues a job of `script` for the pool.
    pub async fn enqueue_script(&self, script: &[&str]) -> Result<u64> {
        self.enqueue(self.job(script)).await
    }

    /// Waits until the job ends; its trace if it succeeded, an error with both if not.
    pub async fn finish(&self, id: u64) -> Result<String> {
        let view = self.gitlab.control.wait_final(id, WITHIN).await?;
        let trace = self.trace(id).await?;
        ensure!(
            view.status == JobStatus::Success,
            "job {id}: {view:?}\n{trace}"
        );
        Ok(trace)
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
        Ok(MachineLog::read(&self.count_log)?.created.len())
    }

    /// (machines created in all, most that existed at once, existing now), from the
    /// provisioner's own log.
    pub fn machine_counts(&self) -> Result<(usize, usize, usize)> {
        let log = MachineLog::read(&self.count_log)?;
        Ok((log.created.len(), log.most, log.alive.len()))
    }

    /// The provisioner's own `list`: what exists at the infrastructure.
    pub fn provider_list(&self) -> Result<Vec<serde_json::Value>> {
        let output = std::process::Command::new(repo_root().join("provisioners/local/provisioner"))
            .arg("list")
            .env("LOCAL_ROOT", &self.machines_root)
            .env("AUTOSCALER_POOL", "local")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .map(|mut i| i.write_all(br#"{"protocol":1,"pool":"local","labels":{}}"#))
                    .transpose()?;
                child.wait_with_output()
            })?;
        let v: serde_json::Value =
            serde_json::from_slice(&output.stdout).context("list answered nonsense")?;
        Ok(v["machines"].as_array().cloned().unwrap_or_default())
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

/// Whether every machine of a non-empty list is gone.
pub fn all_gone(list: &[MachineRecord]) -> bool {
    !list.is_empty() && list.iter().all(|m| m.state == MachineState::Gone)
}
