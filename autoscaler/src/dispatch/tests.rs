use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::store::MemoryStore;

const A: SidecarId = SidecarId(1);
const B: SidecarId = SidecarId(2);
const LONG: Duration = Duration::from_secs(50);

async fn setup(job_ids: &[u64]) -> (Arc<PoolQueue>, Arc<Jobs>) {
    let jobs =
        Arc::new(Jobs::load(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new(1))).unwrap());
    for id in job_ids {
        let p =
            serde_json::to_vec(&serde_json::json!({"id": id, "token": format!("t{id}")})).unwrap();
        jobs.accept("p", &p).unwrap();
    }
    (PoolQueue::new("p", jobs.clone()), jobs)
}

/// Waits until the queue has `n` waiters, by watching its change notifications.
async fn until_waiting(q: &PoolQueue, n: usize) {
    let mut rx = q.subscribe();
    while q.waiting() != n {
        rx.changed().await.unwrap();
    }
}

#[tokio::test]
async fn a_held_request_gets_the_offered_job() {
    let (q, jobs) = setup(&[7]).await;
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.wait_for_job(A, None, LONG).await }
    });
    until_waiting(&q, 1).await;
    assert_eq!(q.demand(), 1);
    q.offer(JobId(7));
    assert_eq!(waiter.await.unwrap(), Some(JobId(7)));
    assert!(matches!(
        jobs.phase(JobId(7)),
        Some(JobPhase::Assigned { sidecar: A, .. })
    ));
    assert_eq!(q.demand(), 0);
}

#[tokio::test]
async fn a_job_offered_with_nobody_waiting_goes_to_the_next_request() {
    let (q, _) = setup(&[7]).await;
    q.offer(JobId(7));
    assert_eq!(q.demand(), 0);
    assert_eq!(q.wait_for_job(B, None, LONG).await, Some(JobId(7)));
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_times_out_and_leaves_no_waiter() {
    let (q, _) = setup(&[]).await;
    assert_eq!(q.wait_for_job(A, None, LONG).await, None);
    assert_eq!(q.waiting(), 0);
    assert_eq!(q.demand(), 0);
}

#[tokio::test]
async fn a_request_that_goes_away_does_not_swallow_a_job() {
    let (q, jobs) = setup(&[7]).await;
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.wait_for_job(A, None, LONG).await }
    });
    until_waiting(&q, 1).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(q.waiting(), 0);
    q.offer(JobId(7));
    assert_eq!(jobs.phase(JobId(7)), Some(JobPhase::Queued));
    assert_eq!(q.wait_for_job(B, None, LONG).await, Some(JobId(7)));
}

#[tokio::test]
async fn a_retried_request_gets_the_same_job_but_only_for_its_sidecar() {
    let (q, jobs) = setup(&[7]).await;
    q.offer(JobId(7));
    assert_eq!(
        q.wait_for_job(A, Some("req-1".into()), LONG).await,
        Some(JobId(7))
    );
    assert_eq!(q.replay(B, "req-1"), None);
    assert_eq!(q.replay(A, "req-1"), Some(JobId(7)));
    jobs.apply(JobId(7), JobEvent::Accepted).unwrap();
    assert_eq!(
        q.replay(A, "req-1"),
        None,
        "an accepted job is not handed out twice"
    );
}

#[tokio::test]
async fn an_unacknowledged_job_is_offered_again() {
    let (q, jobs) = setup(&[7]).await;
    q.offer(JobId(7));
    assert_eq!(q.wait_for_job(A, None, LONG).await, Some(JobId(7)));
    q.requeue_unacknowledged(JobId(7));
    assert_eq!(jobs.phase(JobId(7)), Some(JobPhase::Queued));
    assert_eq!(q.wait_for_job(B, None, LONG).await, Some(JobId(7)));
    // Once accepted, a late timeout changes nothing.
    jobs.apply(JobId(7), JobEvent::Accepted).unwrap();
    q.requeue_unacknowledged(JobId(7));
    assert!(matches!(
        jobs.phase(JobId(7)),
        Some(JobPhase::Running { .. })
    ));
}

#[tokio::test]
async fn stopping_answers_held_requests_and_keeps_jobs_queued() {
    let (q, jobs) = setup(&[7]).await;
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.wait_for_job(A, None, LONG).await }
    });
    until_waiting(&q, 1).await;
    q.stop_handing_out();
    assert_eq!(waiter.await.unwrap(), None);
    q.offer(JobId(7));
    assert_eq!(q.wait_for_job(B, None, LONG).await, None);
    assert_eq!(jobs.phase(JobId(7)), Some(JobPhase::Queued));
    assert_eq!(q.demand(), 0);
}
