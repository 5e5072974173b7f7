//! The autoscaler against a fake GitLab that behaves as GitLab does (runner-protocol.md §3.5,
//! §4): by default jobs run from hand-out (two-phase commit off, as on a self-managed GitLab);
//! with `--two-phase-commit` a job waits for its acknowledgement, and one nobody acknowledges
//! in time is failed (`runner_provisioning_timeout`) and retried as a new job.
//!
//! Real processes throughout: the fake GitLab, the autoscaler, the local provisioner (wrapped
//! to count machines and, with `CREATE_DELAY`, to boot slowly), SSH and built-in sidecars.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, repo_root};
use fake_gitlab::control::{ArtifactSpec, FaultAction, FaultRule, JobSpec, JobStatus, JobView};
use tempfile::TempDir;

const WITHIN: Duration = Duration::from_secs(120);

/// How the fake GitLab hands out jobs.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Running from hand-out: GitLab's default (two-phase commit off).
    Legacy,
    /// Pending until acknowledged (the feature flag on).
    TwoPhase,
}

impl Mode {
    fn args(self) -> &'static [&'static str] {
        match self {
            Mode::Legacy => &[],
            Mode::TwoPhase => &["--two-phase-commit"],
        }
    }
}

/// One test body for both modes.
macro_rules! both_modes {
    ($body:ident: $legacy:ident, $two_phase:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $legacy() -> Result<()> {
            $body(Mode::Legacy).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $two_phase() -> Result<()> {
            $body(Mode::TwoPhase).await
        }
    };
}

struct Rig {
    gitlab: FakeGitLab,
    autoscaler: Autoscaler,
    pool: PoolSpec,
    count_log: PathBuf,
    _cleanup: LocalMachinesGuard,
    _dir: TempDir,
}

/// A pool of built-in sidecars on the counting local provisioner. `provisioner` holds extra
/// `[pools.provisioner]` lines; `env` extra provisioner environment.
async fn rig(
    gitlab_args: &[&str],
    scaling: &str,
    provisioner: &str,
    env: &[(&str, &str)],
) -> Result<Rig> {
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
    let extra = Extra {
        server: "long_poll_timeout = \"10s\"",
        upstream: "keepalive_interval = \"1s\"",
    };
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &extra,
    )
    .await?;
    Ok(Rig {
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

impl Rig {
    async fn enqueue(&self, spec: JobSpec) -> Result<u64> {
        Ok(self.gitlab.control.enqueue(&spec).await?.id)
    }

    fn job(&self, script: &[&str]) -> JobSpec {
        JobSpec::new(&self.pool.upstream_token, script)
    }

    /// Waits until GitLab has handed the job out (running, or pending for acknowledgement).
    async fn wait_taken(&self, id: u64) -> Result<()> {
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
    async fn wait_started(&self, id: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let view = self.gitlab.control.job(id).await?;
            if view.trace_bytes > 0 {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("job {id} never started on a machine: {view:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn trace(&self, id: u64) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.gitlab.control.trace(id).await?).into_owned())
    }

    /// Machines the provisioner created, from its own log.
    fn created(&self) -> Result<usize> {
        let log = std::fs::read_to_string(&self.count_log)?;
        Ok(log.lines().filter(|l| l.starts_with("create ")).count())
    }

    /// Waits until the autoscaler's pool view satisfies `check` (the admin API has no long
    /// poll for pools; it is asked every 100 ms until the deadline).
    async fn wait_pool(
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

impl Rig {
    /// Waits until GitLab has answered `n` job updates `200` (before any machine is ready,
    /// those are the autoscaler's keep-alives for the jobs it holds).
    async fn wait_keepalives(&self, n: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let stats = self.gitlab.control.stats().await?;
            let answered = stats.count("PUT /api/v4/jobs/:id", "200");
            if answered >= n {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("only {answered} job updates answered");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn ensure_success(view: &JobView, trace: &str) -> Result<()> {
    ensure!(
        view.status == JobStatus::Success,
        "job {}: {view:?}\n{trace}",
        view.id
    );
    Ok(())
}

/// Two-phase commit: the machine takes longer to make than GitLab's acknowledgement window,
/// and the job is still there for it, held with `pending` keep-alives, and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_held_with_keepalives_outlives_the_window_while_its_machine_boots() -> Result<()> {
    let r = rig(
        &["--two-phase-commit", "--ack-window", "3s"],
        "max_machines = 1\nidle_time = \"30s\"",
        "",
        &[("CREATE_DELAY", "6")],
    )
    .await?;
    let id = r
        .enqueue(r.job(&["echo held until its machine came"]))
        .await?;
    let view = r.gitlab.control.wait_final(id, WITHIN).await?;
    ensure_success(&view, &r.trace(id).await?)?;
    ensure!(
        view.retried_as.is_none() && view.handouts == 1,
        "the job ran under its own id, handed out once: {view:?}"
    );
    Ok(())
}

/// Two-phase commit: no machine can come within `acquire_timeout`, so the autoscaler stops
/// holding the job; GitLab fails it as `runner_provisioning_timeout` and its retry (a new job)
/// runs to success through the autoscaler once the machine is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_released_for_lack_of_a_machine_is_failed_by_gitlab_and_its_retry_runs() -> Result<()>
{
    let r = rig(
        &["--two-phase-commit", "--ack-window", "4s"],
        "max_machines = 1\nidle_time = \"60s\"\nacquire_timeout = \"8s\"",
        "",
        &[("CREATE_DELAY", "12")],
    )
    .await?;
    let id = r.enqueue(r.job(&["echo the retry ran"])).await?;
    let first = r.gitlab.control.wait_final(id, WITHIN).await?;
    ensure!(
        first.status == JobStatus::Failed
            && first.failure_reason.as_deref() == Some("runner_provisioning_timeout"),
        "the released job should fail as runner_provisioning_timeout: {first:?}"
    );
    ensure!(
        first.trace_bytes == 0,
        "the released job never ran: {first:?}"
    );
    let retry = first.retried_as.context("GitLab retried the job")?;
    let second = r.gitlab.control.wait_final(retry, WITHIN).await?;
    let trace = r.trace(retry).await?;
    ensure_success(&second, &trace)?;
    ensure!(trace.contains("the retry ran"), "{trace}");
    ensure!(r.created()? == 1, "one machine serves both attempts");
    Ok(())
}

/// A job canceled while it waits for capacity (the creation throttle holds its machine back) is
/// dropped within a keep-alive, never runs, and no machine is made for it when the throttle
/// opens.
async fn canceled_while_waiting(mode: Mode) -> Result<()> {
    let r = rig(
        mode.args(),
        "max_machines = 2\ncapacity_per_machine = 1\nmax_use_count = 1\nidle_time = \"12s\"",
        "create_rate = 0.1\ncreate_burst = 1",
        &[],
    )
    .await?;
    let busy = r.enqueue(r.job(&["sleep 8", "echo busy"])).await?;
    let waiting = r.enqueue(r.job(&["echo must not run"])).await?;
    // Taken by the autoscaler, waiting for a second machine, and confirmed once already: the
    // cancel must be found by a later keep-alive.
    r.wait_taken(waiting).await?;
    r.wait_keepalives(2).await?;
    r.gitlab.control.cancel(waiting).await?;
    // Dropped within a keep-alive or two, while the other job still holds the only machine.
    // The busy job runs for 8 s after its machine is ready: the only job that can have ended
    // this soon is the canceled one.
    r.wait_pool("the canceled job dropped", Duration::from_secs(5), |p| {
        p.jobs.get("finished").copied().unwrap_or(0) == 1
    })
    .await?;
    let still = r.gitlab.control.job(busy).await?;
    ensure!(
        !still.status.is_final(),
        "dropped before any machine was free: {still:?}"
    );
    let canceled = r.gitlab.control.wait_final(waiting, WITHIN).await?;
    ensure!(
        canceled.status == JobStatus::Canceled,
        "the cancel is acknowledged by a final update: {canceled:?}"
    );
    let view = r.gitlab.control.wait_final(busy, WITHIN).await?;
    ensure_success(&view, &r.trace(busy).await?)?;
    // The throttle opened (10 s) while the busy job ran; its machine then retired (used once):
    // nothing was made for the canceled job.
    let machines = r
        .autoscaler
        .wait_machines(WITHIN, "every machine gone", |list| {
            !list.is_empty()
                && list
                    .iter()
                    .all(|m| m.state == autoscaler::core::machine::MachineState::Gone)
        })
        .await?;
    ensure!(machines.len() == 1, "machines: {machines:?}");
    ensure!(
        r.created()? == 1,
        "no machine was made for the canceled job"
    );
    let after = r.gitlab.control.job(waiting).await?;
    ensure!(
        after.trace_bytes == 0,
        "the canceled job never ran: {after:?}"
    );
    Ok(())
}

both_modes!(canceled_while_waiting:
    a_job_canceled_while_waiting_for_capacity_gets_no_machine,
    a_held_job_canceled_while_waiting_for_capacity_gets_no_machine);

/// GitLab answers `422 Runner is orphaned`: the pool is paused with GitLab's reason in its
/// status (and log), as for a `403`.
async fn orphaned(mode: Mode) -> Result<()> {
    let mut args = vec!["--long-poll", "1s"];
    args.extend_from_slice(mode.args());
    let r = rig(&args, "max_machines = 1", "", &[]).await?;
    r.gitlab
        .control
        .set_orphaned(&r.pool.upstream_token, Some(422))
        .await?;
    r.wait_pool("pool paused with GitLab's reason", WITHIN, |p| {
        p.paused
            .as_deref()
            .is_some_and(|reason| reason.contains("422") && reason.contains("Runner is orphaned"))
    })
    .await
}

both_modes!(orphaned:
    an_orphaned_runner_pauses_the_pool_with_the_reason,
    an_orphaned_runner_pauses_the_pool_with_the_reason_two_phase);

/// Makes every job update and trace patch fail for `window`, so that GitLab counts as failing
/// and the artifacts uploaded meanwhile are spooled by the autoscaler. The window opens at the
/// job's first trace patch; the job goes on printing for 8 s (a runner sends a patch only when
/// there is output), so patches fail before the upload.
async fn gitlab_fails_job_calls(r: &Rig, window: Duration) -> Result<()> {
    let rule = FaultRule::new(FaultAction::Status {
        status: 502,
        retry_after: None,
    })
    .methods(&["PUT", "PATCH"])
    .path_prefix("/api/v4/jobs/")
    .duration(window);
    r.gitlab.control.add_fault(&rule).await?;
    Ok(())
}

/// Prints a line a second for 8 s.
const TICKING: &str = "for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 1; done";

fn with_artifact(spec: JobSpec) -> JobSpec {
    JobSpec {
        artifacts: vec![ArtifactSpec {
            paths: vec!["out.bin".into()],
            ..ArtifactSpec::default()
        }],
        ..spec
    }
}

/// An upload spooled while GitLab failed, then refused by GitLab (`413`): the job does not
/// end `success` without its artifacts; it fails as a runner's would, with the reason in its log.
async fn spooled_and_refused(mode: Mode) -> Result<()> {
    let mut args = vec!["--max-artifact-size", "64"];
    args.extend_from_slice(mode.args());
    let r = rig(&args, "max_machines = 1", "", &[]).await?;
    let id = r
        .enqueue(with_artifact(
            r.job(&[TICKING, "head -c 4096 /dev/urandom > out.bin"]),
        ))
        .await?;
    r.wait_started(id).await?;
    gitlab_fails_job_calls(&r, Duration::from_secs(9)).await?;
    let view = r.gitlab.control.wait_final(id, WITHIN).await?;
    let trace = r.trace(id).await?;
    ensure!(
        view.status == JobStatus::Failed
            && view.failure_reason.as_deref() == Some("script_failure"),
        "{view:?}\n{trace}"
    );
    ensure!(view.artifacts.is_empty(), "{view:?}");
    ensure!(
        trace.contains("Uploading artifacts to GitLab failed: 413"),
        "the log names GitLab's refusal:\n{trace}"
    );
    Ok(())
}

both_modes!(spooled_and_refused:
    a_spooled_artifact_gitlab_refuses_fails_the_job_with_the_reason,
    a_spooled_artifact_gitlab_refuses_fails_the_job_with_the_reason_two_phase);

/// A spooled upload that GitLab takes slowly: the runner's final update is answered `202`
/// (come back later) while it runs, never held inside the call, and reaches GitLab only after
/// the artifacts, once.
async fn slow_spooled_upload(mode: Mode) -> Result<()> {
    let r = rig(mode.args(), "max_machines = 1", "", &[]).await?;
    let id = r
        .enqueue(with_artifact(
            r.job(&[TICKING, "head -c 4096 /dev/urandom > out.bin"]),
        ))
        .await?;
    r.wait_started(id).await?;
    gitlab_fails_job_calls(&r, Duration::from_secs(9)).await?;
    let slow = FaultRule::new(FaultAction::Delay { ms: 6000 })
        .methods(&["POST"])
        .path_prefix(format!("/api/v4/jobs/{id}/artifacts"))
        .count(1);
    r.gitlab.control.add_fault(&slow).await?;
    let view = r.gitlab.control.wait_final(id, WITHIN).await?;
    ensure_success(&view, &r.trace(id).await?)?;
    ensure!(view.artifacts.len() == 1, "{view:?}");
    ensure!(
        view.final_put_attempts == 1,
        "the final state reached GitLab once, after the artifacts: {view:?}"
    );
    Ok(())
}

both_modes!(slow_spooled_upload:
    a_final_update_waits_with_202_while_a_slow_spooled_upload_runs,
    a_final_update_waits_with_202_while_a_slow_spooled_upload_runs_two_phase);
