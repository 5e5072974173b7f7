//! Several sources in one pool: order, maxima, paused sources, and each source judging only the
//! machines it made.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::core::reconcile::OrphanPolicy;
use crate::provisioner::ProvisionerError;
use crate::provisioner::fake::FakeProvisioner;
use crate::store::MemoryStore;

struct Rig {
    machines: Arc<PoolMachines>,
    onprem: Arc<FakeProvisioner>,
    cloud: Arc<FakeProvisioner>,
}

fn source(name: &str, provider: &Arc<FakeProvisioner>, max: Option<u32>) -> SourceSpec {
    SourceSpec {
        name: name.into(),
        provisioner: provider.clone(),
        max_machines: max,
        create_rate: 100.0,
        create_burst: 100,
        user_data: None,
        reclaim_cooldown: Some(Duration::from_secs(300)),
    }
}

/// `onprem` (at most 2 machines) first, then `cloud`; `shared` puts both on one provider, as
/// two sources in one cloud account are.
fn rig(shared: bool) -> Rig {
    let onprem = Arc::new(FakeProvisioner::new(true));
    let cloud = if shared {
        onprem.clone()
    } else {
        Arc::new(FakeProvisioner::new(true))
    };
    let settings = MachinesSettings {
        pool: "linux".into(),
        autoscaler_id: "as-test".into(),
        ssh_public_key: "ssh-ed25519 AAAA test".into(),
        boot_timeout: Duration::from_secs(600),
        ready_timeout: Duration::from_secs(300),
        orphans: OrphanPolicy::Destroy,
        needs_machine_user_data: false,
    };
    let machines = PoolMachines::load(
        settings,
        vec![
            source("onprem", &onprem, Some(2)),
            source("cloud", &cloud, None),
        ],
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(1_000_000)),
    )
    .unwrap();
    Rig {
        machines,
        onprem,
        cloud,
    }
}

fn by_source(r: &Rig) -> Vec<(String, MachineState)> {
    r.machines
        .live()
        .into_iter()
        .map(|m| (m.source, m.state))
        .collect()
}

#[tokio::test]
async fn machines_come_from_the_first_source_until_it_is_full_then_from_the_next() {
    let r = rig(false);
    assert_eq!(r.machines.create(5).await.unwrap(), 5);
    assert_eq!(r.onprem.machines().len(), 2);
    assert_eq!(r.cloud.machines().len(), 3);
    let onprem = r.onprem.machines();
    let onprem_labels = &onprem.values().next().unwrap().labels;
    assert_eq!(onprem_labels[SOURCE_LABEL], "onprem");
    let sources: Vec<String> = by_source(&r).into_iter().map(|(s, _)| s).collect();
    assert_eq!(sources.iter().filter(|s| *s == "onprem").count(), 2);
    assert_eq!(sources.iter().filter(|s| *s == "cloud").count(), 3);
}

#[tokio::test]
async fn a_paused_first_source_sends_machines_to_the_next_and_the_pool_is_not_paused() {
    let r = rig(false);
    r.onprem.fail_creates([ProvisionerError::Permanent {
        message: "no such image".into(),
    }]);
    r.machines.create(1).await.unwrap();
    assert!(r.onprem.machines().is_empty());
    assert_eq!(
        r.machines.breaker(),
        BreakerState::Closed,
        "another source can still make machines"
    );
    assert_eq!(r.machines.create(2).await.unwrap(), 2);
    assert!(r.onprem.machines().is_empty(), "paused: not asked");
    assert_eq!(r.cloud.machines().len(), 2);
}

#[tokio::test]
async fn destroy_and_status_go_to_the_source_that_made_the_machine() {
    let r = rig(false);
    r.machines.create(3).await.unwrap();
    let cloud_machine = r
        .machines
        .live()
        .into_iter()
        .find(|m| m.source == "cloud")
        .unwrap();
    r.machines.retire(&cloud_machine.id, "test").await.unwrap();
    assert!(r.cloud.machines().is_empty());
    assert_eq!(r.onprem.machines().len(), 2);
}

#[tokio::test]
async fn sources_sharing_an_account_do_not_take_each_others_machines_for_orphans() {
    let r = rig(true);
    r.machines.create(3).await.unwrap();
    assert_eq!(r.onprem.machines().len(), 3);
    r.machines.reconcile().await.unwrap();
    assert_eq!(
        r.onprem.machines().len(),
        3,
        "nothing destroyed as an orphan"
    );
    assert_eq!(r.machines.live().len(), 3, "nothing lost");
}

#[tokio::test]
async fn a_source_that_asks_to_retry_later_is_skipped_until_then() {
    let r = rig(false);
    r.onprem.fail_creates([ProvisionerError::RetryLater {
        message: "InsufficientInstanceCapacity".into(),
        retry_after: Some(Duration::from_secs(60)),
    }]);
    r.machines.create(1).await.unwrap();
    assert!(r.onprem.machines().is_empty());
    assert_eq!(r.machines.create(1).await.unwrap(), 1);
    assert_eq!(r.cloud.machines().len(), 1, "the next source took it");
}

#[tokio::test]
async fn after_a_reclaim_new_machines_come_from_the_next_source_for_the_cool_down() {
    let r = rig(false);
    r.machines.create(1).await.unwrap();
    let spot = r.machines.live()[0].clone();
    assert_eq!(spot.source, "onprem");
    r.onprem.reclaim(spot.provider_id.as_deref().unwrap());
    let reclaims = r.machines.reconcile().await.unwrap();
    r.machines.reclaimed(&reclaims[0]);
    r.machines.create(1).await.unwrap();
    assert_eq!(
        r.cloud.machines().len(),
        1,
        "the cool-down sends it to the next source"
    );
    assert_eq!(r.onprem.machines().len(), 1, "only the reclaimed one");
}
