//! A spot reclaim: the provider reports that it takes a machine back (the provisioner
//! protocol's `interruption` field). The job running on it fails at once with
//! `runner_system_failure` (which CI `retry:` can rerun) instead of after the sidecar's
//! silence timeout, and the pool goes on serving jobs on other machines.

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
            && view.failure_reason.as_deref() == Some("runner_system_failure"),
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
