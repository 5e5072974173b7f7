//! Delivery against a scripted GitLab.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::ManualClock;
use crate::core::job::JobPhase;
use crate::core::{JobId, SidecarId};
use crate::delivery::Delivery;
use crate::jobs::Jobs;
use crate::store::MemoryStore;
use crate::upstream::fake::{FakeUpstream, Scripted};

fn payload(id: u64) -> bytes::Bytes {
    bytes::Bytes::from(
        serde_json::json!({"id": id, "token": format!("job-token-{id}"), "job_info": {"project_id": 1}})
            .to_string(),
    )
}

/// A job that ran on sidecar 1 and was acknowledged, then a restart: the jobs as loaded.
fn restarted_with_a_running_job(store: &Arc<MemoryStore>) -> Arc<Jobs> {
    let clock = Arc::new(ManualClock::new(10_000));
    let jobs = Jobs::load(store.clone(), clock).unwrap();
    jobs.accept("default", &payload(5)).unwrap();
    jobs.start_running(JobId(5), SidecarId(1));
    Arc::new(Jobs::load(store.clone(), Arc::new(ManualClock::new(20_000))).unwrap())
}

fn delivery(upstream: &Arc<FakeUpstream>, jobs: &Arc<Jobs>) -> Arc<Delivery> {
    let spool = tempfile::tempdir().unwrap().keep();
    Delivery::new(
        upstream.clone(),
        jobs.clone(),
        Arc::new(ManualClock::new(20_000)),
        spool,
        Duration::from_secs(30),
    )
}

#[tokio::test]
async fn a_running_job_gitlab_ended_before_a_restart_is_ended_and_frees_its_sidecar() {
    let store = Arc::new(MemoryStore::new());
    let jobs = restarted_with_a_running_job(&store);
    assert_eq!(jobs.with_each_sidecar().get(&SidecarId(1)), Some(&1));
    let upstream = Arc::new(FakeUpstream::default());
    upstream.answer(Ok(Scripted::new(403).header("job-status", "success")));
    delivery(&upstream, &jobs).deliver_owed(1_000_000).await;

    let calls = upstream.calls();
    assert_eq!(calls.len(), 1, "one keep-alive: {calls:?}");
    assert_eq!(calls[0].path, "/api/v4/jobs/5");
    let sent: serde_json::Value = serde_json::from_slice(&calls[0].body).unwrap();
    assert_eq!(sent["state"], "running");
    assert!(matches!(
        jobs.phase(JobId(5)),
        Some(JobPhase::Finished { .. })
    ));
    assert!(
        jobs.with_each_sidecar().is_empty(),
        "the machine is free again"
    );
}

#[tokio::test]
async fn a_running_job_gitlab_still_runs_is_confirmed_and_left_alone() {
    let store = Arc::new(MemoryStore::new());
    let jobs = restarted_with_a_running_job(&store);
    let upstream = Arc::new(FakeUpstream::default());
    upstream.answer(Ok(Scripted::new(200).header("job-status", "running")));
    let delivery = delivery(&upstream, &jobs);
    delivery.deliver_owed(1_000_000).await;
    assert!(matches!(
        jobs.phase(JobId(5)),
        Some(JobPhase::Running { .. })
    ));
    assert!(!jobs.is_unconfirmed(JobId(5)));
    // Confirmed: nothing more is owed, so nothing more is sent.
    delivery.deliver_owed(1_000_000).await;
    assert_eq!(upstream.calls().len(), 1);
}

/// The reason a job whose machine was lost while it ran is failed with, given the failure
/// reasons its payload lists.
async fn reason_for_a_lost_job(failure_reasons: &[&str]) -> String {
    let store = Arc::new(MemoryStore::new());
    let jobs = Arc::new(Jobs::load(store, Arc::new(ManualClock::new(10_000))).unwrap());
    let payload = serde_json::json!({"id": 7, "token": "job-token-7",
        "features": {"failure_reasons": failure_reasons}});
    jobs.accept("default", payload.to_string().as_bytes())
        .unwrap();
    jobs.start_running(JobId(7), SidecarId(1));
    jobs.lose_sidecar(SidecarId(1), "reclaimed").unwrap();
    let upstream = Arc::new(FakeUpstream::default());
    for _ in 0..3 {
        upstream.answer(Ok(Scripted::new(200)));
    }
    delivery(&upstream, &jobs).deliver_owed(1_000_000).await;
    let calls = upstream.calls();
    let put = calls
        .iter()
        .find(|c| c.path == "/api/v4/jobs/7")
        .expect("the final update");
    let sent: serde_json::Value = serde_json::from_slice(&put.body).unwrap();
    assert_eq!(sent["state"], "failed");
    sent["failure_reason"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_job_lost_with_its_machine_is_runner_interrupted_where_gitlab_lists_it() {
    let listed = [
        "script_failure",
        "runner_system_failure",
        "runner_interrupted",
    ];
    assert_eq!(reason_for_a_lost_job(&listed).await, "runner_interrupted");
    // An older GitLab would store an unlisted reason as unknown_failure.
    let older = ["script_failure", "runner_system_failure"];
    assert_eq!(reason_for_a_lost_job(&older).await, "runner_system_failure");
}
