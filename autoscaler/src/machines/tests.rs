//! The machine lifecycle against the in-memory provisioner, with time moved by hand.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::core::demand::Forecast;
use crate::core::reconcile::ProviderState;
use crate::core::scaler::{self, MachineView, ScaleFactorCounts, ScalePolicy, Strategy};
use crate::provisioner::ProvisionerError;
use crate::provisioner::fake::FakeProvisioner;
use crate::store::MemoryStore;

struct Rig {
    machines: Arc<PoolMachines>,
    provider: Arc<FakeProvisioner>,
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
}

fn settings(orphans: OrphanPolicy) -> MachinesSettings {
    MachinesSettings {
        pool: "linux".into(),
        autoscaler_id: "as-test".into(),
        ssh_public_key: "ssh-ed25519 AAAA test".into(),
        boot_timeout: Duration::from_secs(600),
        ready_timeout: Duration::from_secs(300),
        orphans,
        needs_machine_user_data: false,
    }
}

fn sources(provider: &Arc<FakeProvisioner>) -> Vec<SourceSpec> {
    vec![SourceSpec::single(provider.clone(), 1.0, 3)]
}

fn rig(start_running: bool, orphans: OrphanPolicy) -> Rig {
    let provider = Arc::new(FakeProvisioner::new(start_running));
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = Arc::new(MemoryStore::new());
    let machines = PoolMachines::load(
        settings(orphans),
        sources(&provider),
        store.clone(),
        clock.clone(),
    )
    .unwrap();
    Rig {
        machines,
        provider,
        clock,
        store,
    }
}

fn states(r: &Rig) -> Vec<MachineState> {
    r.machines.snapshot().iter().map(|m| m.state).collect()
}

fn failed(message: &str) -> ProvisionerError {
    ProvisionerError::Failed {
        exit: "exit 1".into(),
        message: message.into(),
    }
}

#[tokio::test]
async fn a_created_machine_is_recorded_before_and_after_the_call_and_persisted() {
    let r = rig(true, OrphanPolicy::Destroy);
    assert_eq!(r.machines.create(1).await.unwrap(), 1);
    let m = &r.machines.snapshot()[0];
    assert_eq!(m.state, MachineState::Booting);
    assert_eq!(m.provider_id.as_deref(), Some("fake-1"));
    assert_eq!(
        m.endpoint.as_ref().map(|e| e.host.as_str()),
        Some("127.0.0.1")
    );
    let timeline: Vec<MachineState> = m.timeline.iter().map(|t| t.state).collect();
    assert_eq!(
        timeline,
        [
            MachineState::Requested,
            MachineState::Creating,
            MachineState::Booting
        ]
    );
    // Every transition reached the store.
    let reloaded = PoolMachines::load(
        settings(OrphanPolicy::Destroy),
        sources(&r.provider),
        r.store.clone(),
        r.clock.clone(),
    )
    .unwrap();
    assert_eq!(reloaded.snapshot(), r.machines.snapshot());
    assert_eq!(
        r.provider.machines()["fake-1"].labels["autoscaler-key"],
        m.id
    );
}

#[tokio::test]
async fn the_throttle_bounds_creations_per_second() {
    let r = rig(false, OrphanPolicy::Destroy);
    // Burst of 3, then 1 per second.
    assert_eq!(r.machines.create(10).await.unwrap(), 3);
    assert_eq!(r.machines.create(10).await.unwrap(), 0);
    r.clock.advance(Duration::from_millis(999));
    assert_eq!(r.machines.create(10).await.unwrap(), 0);
    r.clock.advance(Duration::from_millis(1));
    assert_eq!(r.machines.create(10).await.unwrap(), 1);
    let mut made = 4;
    for _ in 0..10 {
        r.clock.advance(Duration::from_secs(1));
        made += r.machines.create(10).await.unwrap();
    }
    assert_eq!(made, 14, "3 at once, then one per second");
    assert_eq!(r.provider.machines().len(), 14);
}

#[tokio::test]
async fn stuck_creation_is_destroyed_and_the_scaler_replaces_it() {
    let r = rig(false, OrphanPolicy::Destroy);
    r.machines.create(1).await.unwrap();
    let stuck = r.machines.snapshot()[0].id.clone();
    assert_eq!(states(&r), [MachineState::Creating]);
    r.clock.advance(Duration::from_secs(599));
    r.machines.reconcile().await.unwrap();
    assert_eq!(states(&r), [MachineState::Creating]);
    r.clock.advance(Duration::from_secs(1));
    r.machines.reconcile().await.unwrap();
    let m = r.machines.get(&stuck).unwrap();
    assert_eq!(m.state, MachineState::Gone);
    assert!(m.timeline.iter().any(|t| {
        t.reason
            .as_deref()
            .is_some_and(|r| r.contains("stuck in creating"))
    }));
    assert!(
        r.provider.machines().is_empty(),
        "the stuck machine was destroyed at the provider"
    );

    // With one job waiting and no live machine, the scaler asks for a replacement.
    let views: Vec<MachineView> = r
        .machines
        .live()
        .iter()
        .map(|m| MachineView {
            id: m.id.clone(),
            state: m.state,
            running_jobs: 0,
            use_count: 0,
            idle_since: 0,
            created_at: m.created_at,
        })
        .collect();
    let policy = ScalePolicy {
        max_machines: 2,
        capacity_per_machine: 1,
        idle_count: 0,
        idle_time: 600_000,
        max_use_count: 0,
        max_age: 0,
        scale_factor: 0.0,
        scale_factor_limit: 0,
        scale_factor_counts: ScaleFactorCounts::RunningAndWaiting,
        strategy: Strategy::Idle,
        billing_period: 0,
        target_wait: 30_000,
        stopped_count: 0,
        max_stopped: 0,
        stopped_price_share: None,
    };
    let plan = scaler::plan(&scaler::PlanInput {
        machines: &views,
        waiting_jobs: 1,
        policy: &policy,
        provisioner_paused: false,
        forecast: Forecast::default(),
        now: r.clock.now(),
    });
    assert_eq!(plan.create, 1);
    assert_eq!(r.machines.create(plan.create).await.unwrap(), 1);
    assert_eq!(r.machines.live().len(), 1);
    assert_ne!(r.machines.live()[0].id, stuck);
}

#[tokio::test]
async fn orphans_are_destroyed_by_default() {
    let r = rig(true, OrphanPolicy::Destroy);
    let ours = r.machines.owner_labels();
    r.provider
        .insert("orphan-1", ours.clone(), ProviderState::Running);
    let mut theirs = ours.clone();
    theirs.insert("autoscaler-id".into(), "someone-else".into());
    r.provider
        .insert("not-ours", theirs, ProviderState::Running);
    r.machines.reconcile().await.unwrap();
    let left: Vec<String> = r.provider.machines().keys().cloned().collect();
    assert_eq!(
        left,
        ["not-ours"],
        "our orphan destroyed, another autoscaler's machine untouched"
    );
    assert!(r.machines.snapshot().is_empty());
}

#[tokio::test]
async fn orphans_are_adopted_when_the_policy_says_so() {
    let r = rig(true, OrphanPolicy::Adopt);
    r.provider.insert(
        "orphan-1",
        r.machines.owner_labels(),
        ProviderState::Running,
    );
    r.machines.reconcile().await.unwrap();
    let adopted = r.machines.snapshot();
    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0].provider_id.as_deref(), Some("orphan-1"));
    assert_eq!(adopted[0].state, MachineState::Booting);
    assert!(r.provider.machines().contains_key("orphan-1"));
    // Adopted once: the next pass knows it.
    r.machines.reconcile().await.unwrap();
    assert_eq!(r.machines.snapshot().len(), 1);
}

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

/// With `start = "user_data"`, a provisioner that ignores each machine's user-data would make
/// machines that never start a sidecar: it is asked for none.
#[tokio::test]
async fn a_provisioner_without_machine_user_data_makes_no_machine_for_a_user_data_pool() {
    let provider = Arc::new(FakeProvisioner::new(true));
    provider.drop_machine_user_data();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = Arc::new(MemoryStore::new());
    let settings = MachinesSettings {
        needs_machine_user_data: true,
        ..settings(OrphanPolicy::Destroy)
    };
    let machines = PoolMachines::load(settings, sources(&provider), store, clock).unwrap();
    machines.reconcile().await.unwrap();
    assert_eq!(machines.create(2).await.unwrap(), 0);
    assert_eq!(provider.calls().0, 0, "the provisioner was asked to create");
}

#[tokio::test]
async fn a_provisioner_without_machine_user_data_serves_an_ssh_pool() {
    let r = rig(true, OrphanPolicy::Destroy);
    r.provider.drop_machine_user_data();
    r.machines.reconcile().await.unwrap();
    assert_eq!(r.machines.create(1).await.unwrap(), 1);
}
