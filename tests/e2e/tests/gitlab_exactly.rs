//! The autoscaler against a fake GitLab that behaves as GitLab does (runner-protocol.md §3.5,
//! §4): by default jobs run from hand-out (two-phase commit off, as on a self-managed GitLab);
//! with `--two-phase-commit` a job waits for its acknowledgement, and one nobody acknowledges
//! in time is failed (`runner_provisioning_timeout`) and retried as a new job.
//!
//! Real processes throughout: the fake GitLab, the autoscaler, the local provisioner (wrapped
//! to count machines and, with `CREATE_DELAY`, to boot slowly), SSH and built-in sidecars.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::counting::{CountingRig as Rig, WITHIN, rig};
use fake_gitlab::control::{ArtifactSpec, FaultAction, FaultRule, JobSpec, JobStatus, JobView};

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

/// Waits until GitLab has answered `n` job updates `200` (before any machine is ready,
/// those are the autoscaler's keep-alives for the jobs it holds).
async fn wait_keepalives(r: &Rig, n: u64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let stats = r.gitlab.control.stats().await?;
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
        // The create takes 12 s, longer than the first attempt is held (10 s); the retry is
        // taken some 3 s later (the ack window) and held 10 s more, which leaves the machine
        // (12 s, a reconcile pass and its injection) several seconds to spare on a busy host.
        "max_machines = 1\nidle_time = \"60s\"\nacquire_timeout = \"10s\"",
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
    // Taskscaler's idle strategy: the demand-aware one would make a machine ahead of demand
    // when the throttle opens, which this test says must not happen for a canceled job.
    let r = rig(
        mode.args(),
        "max_machines = 2\ncapacity_per_machine = 1\nmax_use_count = 1\nidle_time = \"12s\"\nstrategy = \"idle\"",
        "create_rate = 0.025\ncreate_burst = 1",
        &[],
    )
    .await?;
    // The busy job holds the only machine the throttle allows; the other job is taken once it
    // runs, so that it is the one waiting. The throttle reopens 40 s after the first create
    // request: its machine's boot (up to 15 s on a busy host) leaves 25 s of that for the
    // wait, the keep-alives, the cancel and the drop below, and the busy job outlasts it.
    let busy = r.enqueue(r.job(&["echo busy", "sleep 45"])).await?;
    r.wait_started(busy).await?;
    let before = r
        .gitlab
        .control
        .stats()
        .await?
        .count("PUT /api/v4/jobs/:id", "200");
    let waiting = r.enqueue(r.job(&["echo must not run"])).await?;
    // Taken by the autoscaler, waiting for a second machine, and confirmed already: the
    // cancel must be found by a later keep-alive.
    r.wait_taken(waiting).await?;
    wait_keepalives(&r, before + 2).await?;
    r.gitlab.control.cancel(waiting).await?;
    // Dropped within a keep-alive or two, while the other job still holds the only machine.
    // The busy job runs for 45 s: the only job that can have ended this soon is the canceled
    // one.
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
    // The throttle opened (40 s) while the busy job ran; its machine then retired (used once):
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
