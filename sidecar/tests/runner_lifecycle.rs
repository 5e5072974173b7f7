//! The sidecar's runner loop through GitLab's bad moments and its own ending: 5xx and 429
//! answers, a final update GitLab takes later (202), an idle runner's wait timeout, and the
//! signals that drain and then abort it.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use std::time::Duration;

use common::*;
use fake_gitlab::Config;
use fake_gitlab::control::{FaultAction, FaultRule, JobStatus};
use sidecar::runner::Shutdown;

#[tokio::test]
async fn job_survives_502_on_job_endpoints_mid_job() {
    let env = env().await;
    let id = env
        .enqueue(&spec(&[
            "for i in $(seq 1 9); do echo tick $i; sleep 1; done",
        ]))
        .await;
    let runner = env.spawn_runner(1);
    env.ctl.wait_running(id, WAIT).await.unwrap();
    env.ctl
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 502,
                retry_after: None,
            })
            .path_prefix("/api/v4/jobs/")
            .duration(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    runner.await.unwrap();
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Success, "{view:?}");
    let trace = env.trace(id).await;
    assert_trace_integrity(&view, &trace);
    let expected: String = (1..=9).map(|i| format!("tick {i}\n")).collect();
    assert_eq!(text(&step_script_output(&trace)), expected);
    let stats = env.ctl.stats().await.unwrap();
    assert!(
        stats.faults_injected > 0,
        "the fault hit job calls: {stats:?}"
    );
}

#[tokio::test]
async fn final_put_202_is_honoured() {
    let env = env().await;
    let mut job = spec(&["echo done"]);
    job.final_put_202 = 2;
    let id = env.enqueue(&job).await;
    env.run_jobs(1).await;
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Success);
    assert_eq!(view.final_put_attempts, 3, "{view:?}");
    assert_trace_integrity(&view, &env.trace(id).await);
}

#[tokio::test]
async fn job_request_survives_429_with_retry_after() {
    let env = env().await;
    env.ctl
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 429,
                retry_after: Some(1),
            })
            .methods(&["POST"])
            .path_prefix("/api/v4/jobs/request")
            .count(2),
        )
        .await
        .unwrap();
    let id = env.enqueue(&spec(&["echo ok"])).await;
    env.run_jobs(1).await;
    assert_eq!(env.final_view(id).await.status, JobStatus::Success);
    let stats = env.ctl.stats().await.unwrap();
    assert_eq!(
        stats.count("POST /api/v4/jobs/request", "429"),
        2,
        "{stats:?}"
    );
}

#[tokio::test]
async fn wait_timeout_ends_an_idle_runner() {
    let env = env_with(Config {
        long_poll: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let mut config = env.runner_config(0);
    config.wait_timeout = Some(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let summary = tokio::time::timeout(
        Duration::from_secs(30),
        sidecar::runner::run(config, Shutdown::default()),
    )
    .await
    .expect("runner stopped by itself")
    .unwrap();
    assert!(summary.jobs.is_empty());
    assert!(started.elapsed() >= Duration::from_secs(1));
    let runner = env.ctl.runner(TOKEN).await.unwrap();
    assert!(runner.requests >= 1);
}

#[tokio::test]
async fn first_signal_drains_second_signal_aborts_with_system_failure() {
    let env = env().await;
    let fifo = env.dir.path().join("started");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut job = spec(&[
        &format!("echo started > {}", fifo.display()),
        "sleep 60",
        "echo not-reached",
    ]);
    job.after_script = vec!["echo after-script-ran".to_owned()];
    let id = env.enqueue(&job).await;
    let shutdown = Shutdown::default();
    let runner = {
        let config = env.runner_config(0);
        let shutdown = shutdown.clone();
        tokio::spawn(async move { sidecar::runner::run(config, shutdown).await.unwrap() })
    };
    tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo).unwrap())
        .await
        .unwrap();
    // First signal: stop polling, the job keeps running.
    shutdown.graceful.cancel();
    let second = env.enqueue(&spec(&["echo second"])).await;
    // Second signal: abort the running job.
    shutdown.force.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(40), runner)
        .await
        .expect("runner exits after a forced shutdown")
        .unwrap();
    assert_eq!(summary.jobs.len(), 1);
    assert_eq!(
        summary.jobs[0].result,
        Some(sidecar::job::BuildResult::Aborted { by_runner: true })
    );
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(
        view.failure_reason.as_deref(),
        Some("runner_system_failure")
    );
    let t = text(&env.trace(id).await);
    assert!(
        !t.contains("not-reached") && !t.contains("after-script-ran"),
        "{t}"
    );
    // No new job was taken after the first signal.
    assert_eq!(
        env.ctl.job(second).await.unwrap().status,
        JobStatus::Pending
    );
}

#[tokio::test]
async fn wait_timeout_does_not_cut_a_running_job() {
    let env = env_with(Config {
        long_poll: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let id = env.enqueue(&spec(&["sleep 2", "echo finished"])).await;
    let mut config = env.runner_config(0);
    config.wait_timeout = Some(Duration::from_secs(1));
    let summary = tokio::time::timeout(
        Duration::from_secs(30),
        sidecar::runner::run(config, Shutdown::default()),
    )
    .await
    .expect("runner stopped by itself")
    .unwrap();
    assert_eq!(summary.jobs.len(), 1);
    assert_eq!(env.final_view(id).await.status, JobStatus::Success);
}
