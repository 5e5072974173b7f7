//! The whole machine side in-process: the controller with the in-memory provisioner, the fake
//! launcher, the memory store and a clock moved by hand. No machine, no SSH server.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::config::{PolicyCell, PoolPolicy, ScalingConfig};
use crate::core::JobId;
use crate::core::classes::{Classes, MachineClass};
use crate::core::reconcile::OrphanPolicy;
use crate::dispatch::PoolQueue;
use crate::jobs::Jobs;
use crate::launcher::SidecarLauncher;
use crate::launcher::fake::FakeLauncher;
use crate::provisioner::fake::FakeProvisioner;
use crate::sidecars::Sidecars;
use crate::store::MemoryStore;

const POOL: &str = "linux";
/// Background work (injection, teardown) finishes within this, or the test fails.
const SETTLE: Duration = Duration::from_secs(10);

pub(super) struct Rig {
    pub(super) controller: Arc<PoolController>,
    pub(super) machines: Arc<PoolMachines>,
    pub(super) launcher: FakeLauncher,
    pub(super) provider: Arc<FakeProvisioner>,
    pub(super) sidecars: Arc<Sidecars>,
    pub(super) jobs: Arc<Jobs>,
    pub(super) queue: Arc<PoolQueue>,
    pub(super) clock: Arc<ManualClock>,
}

fn rig(scaling: ScalingConfig) -> Rig {
    rig_with(scaling, None)
}

fn rig_with(scaling: ScalingConfig, classes: Option<Classes>) -> Rig {
    rig_launching(scaling, classes, |_| None)
}

/// A rig whose controller starts sidecars with the launcher `launcher` makes from the rig's
/// sidecar registry (`None`: the fake launcher).
pub(super) fn rig_launching(
    scaling: ScalingConfig,
    classes: Option<Classes>,
    launcher: impl FnOnce(&Arc<Sidecars>) -> Option<Arc<dyn SidecarLauncher>>,
) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let provider = Arc::new(FakeProvisioner::new(true));
    let settings = MachinesSettings {
        pool: POOL.into(),
        autoscaler_id: "as-test".into(),
        ssh_public_key: "ssh-ed25519 AAAA test".into(),
        boot_timeout: Duration::from_secs(600),
        ready_timeout: Duration::from_secs(300),
        orphans: OrphanPolicy::Destroy,
        needs_machine_user_data: false,
    };
    let sources = vec![SourceSpec::single(provider.clone(), 100.0, 100)];
    let machines = PoolMachines::load(settings, sources, store.clone(), clock.clone()).unwrap();
    let jobs = Arc::new(Jobs::load(store.clone(), clock.clone()).unwrap());
    let sidecars = Arc::new(Sidecars::load(store, clock.clone()).unwrap());
    let queue = PoolQueue::new(POOL, jobs.clone());
    let fake = FakeLauncher::default();
    let chosen = launcher(&sidecars).unwrap_or_else(|| Arc::new(fake.clone()));
    let controller = PoolController::new(
        machines.clone(),
        chosen,
        sidecars.clone(),
        jobs.clone(),
        queue.clone(),
        ControllerSettings {
            policy: Arc::new(PolicyCell::from_pointee(PoolPolicy {
                scaling,
                policies: Vec::new(),
            })),
            classes: classes.clone(),
            reconcile_interval: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(300),
            silence_timeout: Duration::from_secs(120),
        },
    );
    queue.set_gate(controller.clone());
    if let Some(classes) = classes {
        jobs.set_classes(POOL, classes);
    }
    Rig {
        controller,
        machines,
        launcher: fake,
        provider,
        sidecars,
        jobs,
        queue,
        clock,
    }
}

impl Rig {
    /// A job GitLab handed to the pool.
    pub(super) fn job(&self, id: u64) -> JobId {
        self.job_with(id, &[])
    }

    /// A job with CI variables.
    fn job_with(&self, id: u64, variables: &[(&str, &str)]) -> JobId {
        let variables: Vec<_> = variables
            .iter()
            .map(|(k, v)| serde_json::json!({"key": k, "value": v, "public": true}))
            .collect();
        let payload = serde_json::json!({
            "id": id, "token": format!("glcbt-{id}"), "job_info": {"project_id": 3},
            "variables": variables
        });
        self.jobs
            .accept(POOL, &serde_json::to_vec(&payload).unwrap())
            .unwrap();
        self.queue.offer(JobId(id));
        JobId(id)
    }

    /// Waits until `done` holds for the pool's machines (background tasks move them).
    pub(super) async fn until(&self, what: &str, done: impl Fn(&[MachineRecord]) -> bool) {
        let mut changes = self.machines.subscribe();
        let waited = tokio::time::timeout(SETTLE, async {
            while !done(&self.machines.snapshot()) {
                let _ = changes.changed().await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "{what}: machines are {:?}",
            self.machines
                .snapshot()
                .iter()
                .map(|m| (&m.id, m.state))
                .collect::<Vec<_>>()
        );
    }

    pub(super) fn only_machine(&self) -> MachineRecord {
        let all = self.machines.snapshot();
        assert_eq!(all.len(), 1, "{all:?}");
        all[0].clone()
    }

    /// Steps until the pool's one machine is booted, injected and polled by its sidecar.
    pub(super) async fn serving_machine(&self) -> MachineRecord {
        self.controller.step().await;
        self.controller.step().await;
        self.until("injected", |ms| {
            ms.iter().any(|m| m.state == MachineState::Injecting)
        })
        .await;
        let m = self.only_machine();
        self.machines.sidecar_polled(&m.id);
        self.machines.get(&m.id).unwrap()
    }
}

/// Taskscaler's idle strategy: an idle machine goes after `idle_time` (the demand-aware
/// default would release it after its own grace).
pub(super) fn on_demand() -> ScalingConfig {
    ScalingConfig {
        idle_time: Duration::from_secs(600),
        strategy: crate::core::scaler::Strategy::Idle,
        ..ScalingConfig::default()
    }
}

#[tokio::test]
async fn a_waiting_job_gets_a_machine_whose_sidecar_has_a_token_of_its_own() {
    let r = rig(on_demand());
    let job = r.job(7);
    r.controller.step().await;
    assert_eq!(r.provider.machines().len(), 1, "one machine for one job");
    let m = r.serving_machine().await;
    assert_eq!(m.state, MachineState::Ready);
    assert_eq!(
        m.host_key.as_ref().map(|h| h.key.clone()),
        Some(FakeLauncher::host_key_of(&m.id)),
        "the host key seen first is pinned"
    );
    let launched = r.launcher.launched();
    assert_eq!(launched.len(), 1);
    let sidecar = r
        .sidecars
        .authenticate(&launched[0].token)
        .expect("the token given to the machine opens the mirrored API");
    assert_eq!(sidecar.pool(), POOL);
    assert_eq!(m.sidecar, Some(sidecar.id()));
    let taken = r
        .queue
        .wait_for_job(sidecar.id(), None, Duration::from_secs(1))
        .await;
    assert_eq!(taken, Some(job));
    assert_eq!(r.machines.get(&m.id).unwrap().state, MachineState::Busy);
}

#[tokio::test]
async fn an_idle_machine_goes_after_idle_time_with_its_sidecar_stopped_and_token_revoked() {
    let r = rig(on_demand());
    let job = r.job(7);
    let m = r.serving_machine().await;
    let token = r.launcher.launched()[0].token.clone();
    let sidecar = r.sidecars.authenticate(&token).unwrap();
    assert_eq!(
        r.queue
            .wait_for_job(sidecar.id(), None, Duration::from_secs(1))
            .await,
        Some(job)
    );
    r.jobs
        .apply(job, crate::core::job::JobEvent::Accepted)
        .unwrap();
    r.jobs
        .apply(job, crate::core::job::JobEvent::Ended)
        .unwrap();
    r.controller.step().await;
    assert_eq!(r.machines.get(&m.id).unwrap().state, MachineState::Ready);

    r.clock.advance(Duration::from_secs(599));
    r.controller.step().await;
    assert_eq!(
        r.machines.get(&m.id).unwrap().state,
        MachineState::Ready,
        "kept until idle_time has passed"
    );
    r.clock.advance(Duration::from_secs(1));
    r.controller.step().await;
    r.until("destroyed", |ms| ms.iter().all(|m| m.state.is_gone()))
        .await;
    assert_eq!(r.launcher.stopped(), vec![m.id.clone()]);
    assert!(r.sidecars.authenticate(&token).is_none(), "token revoked");
    assert!(r.provider.machines().is_empty());
    let gone = r.machines.get(&m.id).unwrap();
    assert!(
        gone.reason
            .as_deref()
            .unwrap_or("")
            .starts_with("idle_timeout"),
        "{:?}",
        gone.reason
    );
}

#[tokio::test]
async fn a_machine_that_cannot_be_reached_is_failed_and_replaced() {
    let r = rig(on_demand());
    r.launcher.make_next_unreachable(1);
    r.job(7);
    r.controller.step().await;
    let first = r.only_machine();
    r.controller.step().await;
    r.until("failed", |ms| {
        ms.iter()
            .any(|m| m.id == first.id && m.state == MachineState::Failed)
    })
    .await;
    r.controller.step().await;
    r.until("replaced and the first torn down", |ms| {
        ms.iter().any(|m| m.id != first.id && !m.state.is_gone())
            && ms.iter().any(|m| m.id == first.id && m.state.is_gone())
    })
    .await;
    assert!(
        r.launcher
            .launched()
            .iter()
            .all(|l| l.machine_id != first.id),
        "no sidecar on the unreachable one"
    );
}

#[tokio::test]
async fn a_silent_machine_whose_sidecar_died_is_failed_and_its_running_job_failed() {
    let r = rig(on_demand());
    let job = r.job(7);
    let m = r.serving_machine().await;
    let sidecar = r
        .sidecars
        .authenticate(&r.launcher.launched()[0].token)
        .unwrap();
    r.sidecars.note_poll(&sidecar, None, None);
    r.queue
        .wait_for_job(sidecar.id(), None, Duration::from_secs(1))
        .await
        .unwrap();
    r.jobs
        .apply(job, crate::core::job::JobEvent::Accepted)
        .unwrap();

    r.launcher.kill_sidecar(&m.id);
    r.clock.advance(Duration::from_secs(121));
    r.controller.step().await;
    r.until("failed after the probe", |ms| {
        ms.iter()
            .any(|x| x.id == m.id && x.state == MachineState::Failed)
    })
    .await;
    r.controller.step().await;
    let phase = r.jobs.get(job).unwrap().phase;
    assert!(
        matches!(phase, crate::core::job::JobPhase::Failing { ref reason, .. } if reason.contains(&m.id)),
        "the job it ran is to be failed at GitLab at once: {phase:?}"
    );
}

#[tokio::test]
async fn max_machines_counts_every_live_state_and_caps_creation() {
    let r = rig(ScalingConfig {
        max_machines: 2,
        ..on_demand()
    });
    for id in 1..=5 {
        r.job(id);
    }
    r.controller.step().await;
    r.controller.step().await;
    r.controller.step().await;
    assert_eq!(r.provider.machines().len(), 2);
    assert_eq!(r.machines.live().len(), 2);
}

mod classes;
