//! The machine lifecycle when the provider fails: the circuit breaker, a permanent failure,
//! machines the provider loses or reclaims, destroys retried, a create whose answer was lost.

use std::time::Duration;

use super::tests::{failed, rig, states};
use super::*;
use crate::core::reconcile::ProviderState;
use crate::provisioner::ProvisionerError;

#[tokio::test]
async fn the_circuit_breaker_opens_after_repeated_failures_and_closes_again() {
    let r = rig(false, OrphanPolicy::Destroy);
    r.provider
        .fail_creates((0..5).map(|_| failed("cloud API 500")));
    for _ in 0..5 {
        r.clock.advance(Duration::from_secs(1));
        assert_eq!(r.machines.create(1).await.unwrap(), 1);
    }
    assert!(
        matches!(r.machines.breaker(), BreakerState::Open { ref reason, .. } if reason.contains("cloud API 500"))
    );
    // Failed creates that made nothing stop counting at once.
    assert!(r.machines.live().is_empty(), "{:?}", states(&r));
    let (creates, _) = r.provider.calls();
    r.clock.advance(Duration::from_secs(29));
    assert_eq!(r.machines.create(1).await.unwrap(), 0, "paused");
    assert_eq!(r.provider.calls().0, creates, "no call while open");
    r.clock.advance(Duration::from_secs(1));
    assert_eq!(
        r.machines.create(1).await.unwrap(),
        1,
        "the trial call after the pause"
    );
    assert_eq!(r.machines.breaker(), BreakerState::Closed);
}

#[tokio::test]
async fn a_permanent_failure_pauses_the_pool_at_once() {
    let r = rig(false, OrphanPolicy::Destroy);
    r.provider.fail_creates([ProvisionerError::Permanent {
        message: "no such image".into(),
    }]);
    r.machines.create(1).await.unwrap();
    assert!(
        matches!(r.machines.breaker(), BreakerState::Open { ref reason, .. } if reason.contains("no such image"))
    );
}

#[tokio::test]
async fn a_machine_the_provider_lost_is_gone() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.machines.create(1).await.unwrap();
    let id = r.machines.snapshot()[0].id.clone();
    r.provider.lose("fake-1");
    r.clock.advance(Duration::from_secs(30));
    r.machines.reconcile().await.unwrap();
    assert_eq!(
        r.machines.get(&id).unwrap().state,
        MachineState::Booting,
        "within the list grace"
    );
    r.clock.advance(Duration::from_secs(30));
    r.machines.reconcile().await.unwrap();
    assert_eq!(r.machines.get(&id).unwrap().state, MachineState::Gone);
}

#[tokio::test]
async fn a_failed_destroy_is_retried_with_backoff_until_gone() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.machines.create(1).await.unwrap();
    let id = r.machines.snapshot()[0].id.clone();
    r.provider
        .fail_destroys([failed("busy"), failed("busy"), failed("busy")]);
    r.machines.retire(&id, "test").await.unwrap();
    assert_eq!(r.machines.get(&id).unwrap().state, MachineState::Destroying);
    assert_eq!(r.provider.calls().1, 1);
    // Not before the backoff...
    r.machines.reconcile().await.unwrap();
    assert_eq!(r.provider.calls().1, 1);
    // ...then again, with growing waits, until the provider agrees.
    for expected_calls in 2..=4 {
        let due = r.machines.get(&id).unwrap().next_attempt;
        r.clock.advance(Duration::from_millis(due - r.clock.now()));
        r.machines.reconcile().await.unwrap();
        assert_eq!(r.provider.calls().1, expected_calls);
    }
    assert_eq!(r.machines.get(&id).unwrap().state, MachineState::Gone);
    assert!(r.provider.machines().is_empty());
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_found_by_its_key() {
    let r = rig(true, OrphanPolicy::Destroy);
    // The provider made the machine, but the call timed out before we heard of it.
    r.provider
        .fail_creates([ProvisionerError::TimedOut(Duration::from_secs(300))]);
    r.machines.create(1).await.unwrap();
    let id = r.machines.snapshot()[0].id.clone();
    assert_eq!(r.machines.get(&id).unwrap().state, MachineState::Requested);
    r.provider.insert(
        "late-1",
        {
            let mut l = r.machines.owner_labels();
            l.insert("autoscaler-key".into(), id.clone());
            l
        },
        ProviderState::Running,
    );
    r.machines.reconcile().await.unwrap();
    let m = r.machines.get(&id).unwrap();
    assert_eq!(m.provider_id.as_deref(), Some("late-1"));
    assert_eq!(m.state, MachineState::Creating);
    r.machines.reconcile().await.unwrap();
    assert_eq!(r.machines.get(&id).unwrap().state, MachineState::Booting);
    assert_eq!(
        r.provider.machines().len(),
        1,
        "no second machine and no orphan destroy"
    );
}

#[tokio::test]
async fn a_failing_list_counts_against_the_breaker_and_changes_nothing() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.machines.create(1).await.unwrap();
    r.provider
        .fail_lists((0..5).map(|_| failed("timeout talking to the cloud")));
    for _ in 0..5 {
        r.machines.reconcile().await.unwrap();
    }
    assert_eq!(states(&r), [MachineState::Booting]);
    assert!(matches!(r.machines.breaker(), BreakerState::Open { .. }));
}

#[tokio::test]
async fn the_reason_a_machine_left_service_survives_its_teardown() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.machines.create(2).await.unwrap();
    let ids: Vec<String> = r.machines.snapshot().iter().map(|m| m.id.clone()).collect();
    let steps = |id: &str, last: &[(MachineEvent, &str)]| {
        let first = [
            (MachineEvent::Reachable, "reachable over SSH"),
            (MachineEvent::SidecarPolled, "its sidecar asked for a job"),
            (MachineEvent::Drain, "ran 2 jobs (max_use_count 2)"),
        ];
        for (event, reason) in first.iter().chain(last) {
            r.machines.apply(id, event.clone(), reason).unwrap();
        }
        r.machines.get(id).unwrap()
    };
    let drained = steps(&ids[0], &[(MachineEvent::Destroy, "drained")]);
    assert_eq!(drained.state, MachineState::Destroying);
    assert_eq!(
        drained.reason.as_deref(),
        Some("ran 2 jobs (max_use_count 2)")
    );
    // A failure while leaving says more than the drain did, so it takes over.
    let broke = steps(
        &ids[1],
        &[
            (MachineEvent::Fail, "sidecar process gone"),
            (MachineEvent::Destroy, "failed"),
        ],
    );
    assert_eq!(broke.state, MachineState::Destroying);
    assert_eq!(broke.reason.as_deref(), Some("sidecar process gone"));
}

#[tokio::test]
async fn a_machine_the_provider_reclaims_leaves_service_at_the_next_reconcile() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.machines.create(2).await.unwrap();
    let reclaimed = r.machines.snapshot()[0].clone();
    let provider_id = reclaimed.provider_id.clone().unwrap();
    r.provider.reclaim(&provider_id);
    let reclaims = r.machines.reconcile().await.unwrap();
    assert_eq!(reclaims.len(), 1);
    assert_eq!(reclaims[0].machine.id, reclaimed.id);
    assert_eq!(
        r.machines.get(&reclaimed.id).unwrap().state,
        MachineState::Booting,
        "still in service until the caller has moved its jobs"
    );
    r.machines.reclaimed(&reclaims[0]);
    r.machines.reconcile().await.unwrap();
    let after = r.machines.get(&reclaimed.id).unwrap();
    let failed = after
        .timeline
        .iter()
        .find(|t| t.state == MachineState::Failed)
        .expect("the machine failed");
    assert!(
        failed
            .reason
            .as_deref()
            .is_some_and(|why| why.contains("spot_reclaim")),
        "{after:?}"
    );
    assert!(
        matches!(
            after.state,
            MachineState::Failed | MachineState::Destroying | MachineState::Gone
        ),
        "out of service: {after:?}"
    );
    let other = &r.machines.snapshot()[1];
    assert_eq!(
        other.state,
        MachineState::Booting,
        "the other machine is left alone"
    );
}
