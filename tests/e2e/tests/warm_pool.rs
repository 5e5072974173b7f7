//! The warm pool on the local provisioner, end to end: an idle machine is stopped (its sidecar
//! ended, its token dead although the file stays on its disk), and the next job starts it again
//! with a fresh token instead of making a machine.

use std::time::Duration;

use anyhow::{Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::{JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(120);

/// What the autoscaler answers a sidecar that verifies `token` (from the machine's address).
async fn verify(autoscaler: &Autoscaler, token: &str) -> Result<StatusCode> {
    let answer = reqwest::Client::new()
        .post(format!("{}/api/v4/runners/verify", autoscaler.url))
        .json(&json!({ "token": token }))
        .timeout(Duration::from_secs(10))
        .send()
        .await?;
    Ok(answer.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_machine_is_stopped_and_started_again_for_the_next_job_with_a_fresh_token()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let _guard = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--long-poll", "5s"]).await?;
    let pool = PoolSpec::local(
        "warm",
        &machines_root,
        "strategy = \"idle\"\nmax_machines = 1\nidle_time = \"2s\"\nstopped_count = 1\nmax_stopped = 1",
        "mode = \"builtin\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"2s\"",
    )
    .await?;
    let run = |script: &'static str| {
        let (gitlab, token) = (&gitlab, &pool.upstream_token);
        async move {
            let job = gitlab
                .control
                .enqueue(&JobSpec::new(token, &[script]))
                .await?;
            let view = gitlab.control.wait_final(job.id, WITHIN).await?;
            ensure!(
                view.status == JobStatus::Success,
                "job {}: {view:?}",
                job.id
            );
            anyhow::Ok(())
        }
    };

    run("echo first").await?;
    let old_token = e2e::local_machine_token(&machines_root)?;
    let stopped = autoscaler
        .wait_machines(WITHIN, "the idle machine stopped", |l| {
            l.len() == 1 && l[0].state == MachineState::Stopped
        })
        .await?;
    let machine = stopped[0].id.clone();
    ensure!(
        e2e::local_machine_token(&machines_root)? == old_token,
        "the token file stays on the stopped disk"
    );
    ensure!(
        verify(&autoscaler, &old_token).await? == StatusCode::FORBIDDEN,
        "the stopped machine's token is dead"
    );

    run("echo second").await?;
    let list = autoscaler.machines().await?;
    ensure!(
        list.len() == 1,
        "no machine made for the second job: {list:?}"
    );
    let started = &list[0];
    ensure!(
        started.id == machine,
        "{} ran it, not {machine}",
        started.id
    );
    ensure!(started.restarted_at.is_some(), "{started:?}");
    let states: Vec<MachineState> = started.timeline.iter().map(|t| t.state).collect();
    ensure!(
        states.contains(&MachineState::Starting),
        "it came back through a start: {states:?}"
    );
    // The second job ran, so its sidecar polled with the token the start gave it (it may be
    // stopped again by now, idle past idle_time, and that token dead in its turn).
    let new_token = e2e::local_machine_token(&machines_root)?;
    ensure!(new_token != old_token, "a fresh token on start");
    ensure!(verify(&autoscaler, &old_token).await? == StatusCode::FORBIDDEN);
    Ok(())
}
