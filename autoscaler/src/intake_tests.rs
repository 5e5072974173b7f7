//! How many jobs each intake mode asks GitLab for.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::SystemClock;
use crate::config::{Intake as Mode, PoolConfig, ProvisionerConfig, ScalingConfig};
use crate::core::reconcile::OrphanPolicy;
use crate::secret::Secret;
use crate::store::MemoryStore;
use crate::upstream::fake::FakeUpstream;

fn intake(mode: Mode) -> Intake {
    let source = ProvisionerConfig {
        name: "default".into(),
        max_machines: None,
        reclaim_cooldown: None,
        command: "/bin/true".into(),
        env: Default::default(),
        max_concurrency: 4,
        create_rate: 1.0,
        create_burst: 5,
        orphan_policy: OrphanPolicy::Destroy,
        timeouts: Default::default(),
        boot_timeout: Duration::from_secs(600),
        reconcile_interval: Duration::from_secs(10),
        user_data: None,
    };
    let config = PoolConfig {
        name: "p".into(),
        upstream_token: Secret::new("glrt-test"),
        registration_token: None,
        request_concurrency: 256,
        assign_ack_timeout: Duration::from_secs(120),
        provisioner: Some(source.clone()),
        sources: vec![source],
        classes: None,
        scaling: ScalingConfig {
            max_machines: 10,
            intake: mode,
            hybrid_ahead: 3,
            idle_count: 1,
            ..ScalingConfig::default()
        },
        policies: Vec::new(),
        sidecar: None,
    };
    let store = Arc::new(MemoryStore::new());
    let jobs = Arc::new(Jobs::load(store.clone(), Arc::new(SystemClock)).unwrap());
    let sidecars = Arc::new(Sidecars::load(store.clone(), Arc::new(SystemClock)).unwrap());
    let pool = Pool::open(config, jobs.clone(), store.as_ref()).unwrap();
    Intake {
        pool,
        upstream: Arc::new(FakeUpstream::default()),
        jobs,
        sidecars,
        poll_interval: Duration::from_secs(1),
    }
}

fn take(intake: &Intake, id: u64) {
    let payload = serde_json::json!({"id": id, "token": format!("t{id}")});
    intake
        .jobs
        .accept("p", &serde_json::to_vec(&payload).unwrap())
        .unwrap();
}

#[test]
fn hybrid_takes_a_bounded_number_of_jobs_ahead_of_any_sidecar() {
    let i = intake(Mode::Hybrid);
    assert_eq!(i.want(), 3, "hybrid_ahead with no sidecar waiting");
    take(&i, 1);
    take(&i, 2);
    assert_eq!(i.want(), 1);
    take(&i, 3);
    assert_eq!(i.want(), 0, "three jobs wait for machines: no more");
}

#[test]
fn on_demand_takes_as_many_jobs_as_the_pool_can_run_and_preemptive_none_unasked() {
    let i = intake(Mode::OnDemand);
    assert_eq!(i.want(), 10);
    take(&i, 1);
    assert_eq!(i.want(), 9);
    assert_eq!(intake(Mode::Preemptive).want(), 0, "no sidecar waits");
}

#[test]
fn before_any_sidecar_polls_a_pool_presents_its_configured_runners_executor() {
    let docker = config::SidecarMode::GitlabRunner {
        executor: "docker".into(),
        extra_config: String::new(),
    };
    let info = configured_info(Some(&docker));
    assert_eq!(info["executor"], "docker");
    assert_eq!(info["features"]["services"], true);
    let builtin = configured_info(Some(&config::SidecarMode::Builtin));
    assert_eq!(builtin["executor"], "shell");
    assert_eq!(configured_info(None)["executor"], "shell");
}
