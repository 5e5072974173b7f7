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

pub(super) struct Rig {
    pub(super) machines: Arc<PoolMachines>,
    pub(super) provider: Arc<FakeProvisioner>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) store: Arc<MemoryStore>,
}

pub(super) fn settings(orphans: OrphanPolicy) -> MachinesSettings {
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

pub(super) fn sources(provider: &Arc<FakeProvisioner>) -> Vec<SourceSpec> {
    vec![SourceSpec::single(provider.clone(), 1.0, 3)]
}

pub(super) fn rig(start_running: bool, orphans: OrphanPolicy) -> Rig {
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

pub(super) fn states(r: &Rig) -> Vec<MachineState> {
    r.machines.snapshot().iter().map(|m| m.state).collect()
}

pub(super) fn failed(message: &str) -> ProvisionerError {
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
