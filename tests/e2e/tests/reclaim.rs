//! A spot reclaim: the provider reports that it takes a machine back (the provisioner
//! protocol's `interruption` field). The job running on it fails at once with
//! `runner_interrupted` (listed in the fake GitLab's payloads, as in current GitLab's; CI
//! `retry:` can rerun it) instead of after the sidecar's silence timeout, and the pool goes on
//! serving jobs on other machines.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::counting::{WITHIN, rig};
use fake_gitlab::control::JobStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_machine_fails_its_running_job_within_seconds_and_the_pool_goes_on()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let reclaims = dir.path().join("reclaimed");
    std::fs::write(&reclaims, "")?;
    let reclaim_file = reclaims.display().to_string();
    let r = rig(
        &[],
        "max_machines = 2",
        "",
        &[("RECLAIM_FILE", reclaim_file.as_str())],
    )
    .await?;
    let long = r
        .enqueue(r.job(&["for i in $(seq 120); do echo tick $i; sleep 1; done"]))
        .await?;
    r.wait_started(long).await?;
    let machines = r.autoscaler.machines().await?;
    let busy = machines
        .iter()
        .find(|m| m.state == MachineState::Busy)
        .context("the long job's machine")?;
    let provider_id = busy.provider_id.clone().context("a provider id")?;
    std::fs::write(&reclaims, format!("{provider_id}\n"))?;
    let reclaimed_at = Instant::now();

    let view = r.gitlab.control.wait_final(long, WITHIN).await?;
    let waited = reclaimed_at.elapsed();
    let trace = r.trace(long).await?;
    ensure!(
        view.status == JobStatus::Failed
            && view.failure_reason.as_deref() == Some("runner_interrupted"),
        "{view:?}\n{trace}"
    );
    ensure!(
        waited < Duration::from_secs(20),
        "failed {waited:?} after the reclaim, not within seconds"
    );
    ensure!(trace.contains("spot_reclaim"), "the log says why:\n{trace}");

    let next = r.enqueue(r.job(&["echo on another machine"])).await?;
    let view = r.gitlab.control.wait_final(next, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    Ok(())
}

/// A reclaim reported while the machine is idle, before it started the next job: the machine
/// gets no more work and is destroyed, and the job runs on a machine made for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_reclaimed_before_its_next_job_gets_none_and_the_job_runs_on_another()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let reclaims = dir.path().join("reclaimed");
    std::fs::write(&reclaims, "")?;
    let reclaim_file = reclaims.display().to_string();
    let r = rig(
        &[],
        // The idle strategy makes machines only for jobs, so that they can be counted.
        "max_machines = 2\nidle_time = \"10m\"\nstrategy = \"idle\"",
        "",
        &[("RECLAIM_FILE", reclaim_file.as_str())],
    )
    .await?;
    let warm = r.enqueue(r.job(&["echo warm"])).await?;
    let view = r.gitlab.control.wait_final(warm, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    let machines = r
        .autoscaler
        .wait_machines(WITHIN, "the first machine idle", |ms| {
            ms.iter().any(|m| m.state == MachineState::Ready)
        })
        .await?;
    let idle = machines
        .iter()
        .find(|m| m.state == MachineState::Ready)
        .context("the idle machine")?;
    let provider_id = idle.provider_id.clone().context("a provider id")?;
    std::fs::write(&reclaims, format!("{provider_id}\n"))?;
    // The job is enqueued once the autoscaler has taken the machine out of service: had it
    // been given the job a moment earlier and started it, the job would fail (the other test).
    r.autoscaler
        .wait_machines(WITHIN, "the reclaimed machine out of service", |ms| {
            ms.iter().any(|m| {
                m.id == idle.id
                    && matches!(
                        m.state,
                        MachineState::Failed | MachineState::Destroying | MachineState::Gone
                    )
            })
        })
        .await?;

    let next = r.enqueue(r.job(&["echo on another machine"])).await?;
    let view = r.gitlab.control.wait_final(next, WITHIN).await?;
    let trace = r.trace(next).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}\n{trace}");
    ensure!(r.created()? == 2, "a second machine was made for the job");
    let machines = r.autoscaler.machines().await?;
    let reclaimed = machines.iter().find(|m| m.id == idle.id);
    ensure!(
        reclaimed.is_none_or(|m| m.use_count == 1 && m.state != MachineState::Ready),
        "the reclaimed machine ran only the first job: {reclaimed:?}"
    );
    ensure!(
        machines.iter().any(|m| m.id != idle.id && m.use_count == 1),
        "another machine ran the job: {machines:?}"
    );
    Ok(())
}
