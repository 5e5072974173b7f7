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
