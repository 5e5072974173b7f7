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

/// A gate that lets every sidecar take jobs and describes their machines from a table.
#[derive(Debug)]
struct Machines(HashMap<SidecarId, Placement>);

impl SlotGate for Machines {
    fn may_take(&self, _sidecar: SidecarId) -> bool {
        true
    }
    fn taken(&self, _sidecar: SidecarId, _job: JobId) {}
    fn placements(&self, sidecars: &[SidecarId]) -> Vec<Placement> {
        sidecars
            .iter()
            .map(|s| self.0.get(s).cloned().unwrap_or_default())
            .collect()
    }
}

async fn routed(job_project: u64, machines: &[(SidecarId, Placement)]) -> SidecarId {
    let jobs =
        Arc::new(Jobs::load(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new(1))).unwrap());
    let p = serde_json::json!({"id": 9, "token": "t9", "job_info": {"project_id": job_project}});
    jobs.accept("p", &serde_json::to_vec(&p).unwrap()).unwrap();
    let q = PoolQueue::new("p", jobs.clone());
    q.set_gate(Arc::new(Machines(machines.iter().cloned().collect())));
    let waiters: Vec<_> = machines
        .iter()
        .map(|(s, _)| {
            let (q, s) = (q.clone(), *s);
            tokio::spawn(async move { (s, q.wait_for_job(s, None, LONG).await) })
        })
        .collect();
    until_waiting(&q, machines.len()).await;
    q.offer(JobId(9));
    q.stop_handing_out();
    let mut winner = None;
    for w in waiters {
        if let (s, Some(_)) = w.await.unwrap() {
            winner = Some(s);
        }
    }
    winner.expect("someone got the job")
}

const C: SidecarId = SidecarId(3);

fn placed(last_project: Option<u64>, running: u32) -> Placement {
    Placement {
        last_project,
        running,
        class: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_goes_to_the_machine_that_last_ran_its_project() {
    let machines = [
        (A, placed(Some(1), 2)),
        (B, placed(Some(5), 0)),
        (C, placed(None, 1)),
    ];
    assert_eq!(routed(5, &machines).await, B);
}

#[tokio::test(start_paused = true)]
async fn without_affinity_a_job_goes_to_the_busiest_machine_with_a_free_slot() {
    let machines = [
        (A, placed(Some(1), 0)),
        (B, placed(None, 2)),
        (C, placed(None, 1)),
    ];
    assert_eq!(routed(5, &machines).await, B);
}

#[tokio::test]
async fn a_request_takes_the_ready_job_of_its_machines_last_project_first() {
    let jobs =
        Arc::new(Jobs::load(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new(1))).unwrap());
    for (id, project) in [(1, 10), (2, 20), (3, 10)] {
        let p = serde_json::json!({"id": id, "token": format!("t{id}"), "job_info": {"project_id": project}});
        jobs.accept("p", &serde_json::to_vec(&p).unwrap()).unwrap();
    }
    let q = PoolQueue::new("p", jobs.clone());
    q.set_gate(Arc::new(Machines([(A, placed(Some(20), 0))].into())));
    for id in [1, 2, 3] {
        q.offer(JobId(id));
    }
    assert_eq!(q.wait_for_job(A, None, LONG).await, Some(JobId(2)));
    assert_eq!(q.wait_for_job(B, None, LONG).await, Some(JobId(1)));
}
