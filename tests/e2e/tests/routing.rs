//! Routing within a pool: a project's next job goes to the machine that ran its last one (warm
//! caches) even when another machine has waited longer.

use anyhow::{Context, Result, ensure};
use e2e::counting::{WITHIN, rig};
use fake_gitlab::control::JobStatus;

/// The local machine a job ran on, from its own log line.
fn machine_of(trace: &str) -> Option<String> {
    trace
        .lines()
        .find_map(|l| l.strip_prefix("ran-on="))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_second_job_goes_to_the_machine_that_ran_its_first() -> Result<()> {
    let r = rig(&[], "max_machines = 2\nidle_count = 2", "", &[]).await?;
    r.wait_pool("two sidecars waiting", WITHIN, |p| p.requests_waiting == 2)
        .await?;
    let script = ["echo ran-on=$AUTOSCALER_LOCAL_MACHINE"];
    let mut first = r.job(&script);
    first.project_id = 42;
    let first = r.enqueue(first).await?;
    let view = r.gitlab.control.wait_final(first, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    let first_machine = machine_of(&r.trace(first).await?).context("first job's machine")?;

    // Both sidecars wait again; the other machine's request is the older one.
    r.wait_pool("both sidecars waiting again", WITHIN, |p| {
        p.requests_waiting == 2
    })
    .await?;
    let mut second = r.job(&script);
    second.project_id = 42;
    let second = r.enqueue(second).await?;
    let view = r.gitlab.control.wait_final(second, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    let second_machine = machine_of(&r.trace(second).await?).context("second job's machine")?;
    ensure!(
        first_machine == second_machine,
        "project 42 ran on {first_machine}, then on {second_machine}"
    );
    Ok(())
}
