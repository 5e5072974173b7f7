//! The warm pool carried out, in-process: the controller stops an idle machine (its sidecar
//! ended, its token revoked) instead of destroying it, and starts it again, with a fresh
//! sidecar token, before it makes a new machine.

use std::time::Duration;

use super::controller_tests::{Rig, on_demand, rig_launching};
use crate::config::ScalingConfig;
use crate::core::JobId;
use crate::core::job::JobEvent;
use crate::core::machine::MachineState;
use crate::core::reconcile::ProviderState;

/// Taskscaler's idle strategy with a warm pool of one: an idle machine is stopped after
/// `idle_time` (600 s) rather than destroyed.
fn warm() -> ScalingConfig {
    ScalingConfig {
        stopped_count: 1,
        max_stopped: 1,
        ..on_demand()
    }
}

/// Hands `job` to the machine's sidecar (whose token is `token`) and ends it.
async fn run_job(r: &Rig, token: &str, job: JobId) {
    let sidecar = r.sidecars.authenticate(token).expect("a live token");
    let taken = r
        .queue
        .wait_for_job(sidecar.id(), None, Duration::from_secs(1))
        .await;
    assert_eq!(taken, Some(job));
    r.jobs.apply(job, JobEvent::Accepted).unwrap();
    r.jobs.apply(job, JobEvent::Ended).unwrap();
}

#[tokio::test]
async fn an_idle_machine_is_stopped_without_a_live_token_and_started_with_a_fresh_one() {
    let r = rig_launching(warm(), None, |_| None);
    let first_job = r.job(7);
    let m = r.serving_machine().await;
    let old_token = r.launcher.launched()[0].token.clone();
    run_job(&r, &old_token, first_job).await;
    r.controller.step().await;
    r.clock.advance(Duration::from_secs(600));
    r.controller.step().await;
    r.until("stopped", |ms| ms[0].state == MachineState::Stopped)
        .await;

    assert_eq!(r.launcher.stopped(), vec![m.id.clone()], "sidecar ended");
    assert!(
        r.sidecars.authenticate(&old_token).is_none(),
        "token revoked"
    );
    let stopped = r.machines.get(&m.id).unwrap();
    assert_eq!(stopped.sidecar, None);
    let stopping = stopped
        .timeline
        .iter()
        .find(|t| t.state == MachineState::Stopping)
        .and_then(|t| t.reason.clone());
    assert!(
        stopping.as_deref().unwrap_or("").starts_with("stop_idle"),
        "{stopping:?}"
    );
    let at_provider = r.provider.machines();
    assert_eq!(at_provider.len(), 1, "stopped, not destroyed");
    assert!(
        at_provider
            .values()
            .all(|p| p.state == ProviderState::Stopped)
    );

    // The next job starts the stopped machine rather than making one.
    let second_job = r.job(8);
    r.controller.step().await;
    r.until("started and injected again", |ms| {
        ms[0].state == MachineState::Injecting
    })
    .await;
    assert_eq!(
        r.provider.calls().0,
        1,
        "no machine made for the second job"
    );
    r.machines.sidecar_polled(&m.id);
    let launched = r.launcher.launched();
    assert_eq!(launched.len(), 2, "{launched:?}");
    let new_token = &launched[1].token;
    assert_ne!(new_token, &old_token);
    let started = r.machines.get(&m.id).unwrap();
    assert_eq!(started.state, MachineState::Ready);
    assert!(started.restarted_at.is_some());
    assert_eq!(
        started.sidecar,
        r.sidecars.authenticate(new_token).map(|s| s.id())
    );
    run_job(&r, new_token, second_job).await;
}

#[tokio::test]
async fn without_the_stop_start_capability_an_idle_machine_is_destroyed_as_before() {
    let r = rig_launching(warm(), None, |_| None);
    r.provider.drop_stop_start();
    let job = r.job(7);
    let m = r.serving_machine().await;
    let token = r.launcher.launched()[0].token.clone();
    run_job(&r, &token, job).await;
    r.controller.step().await;
    r.clock.advance(Duration::from_secs(600));
    r.controller.step().await;
    r.until("destroyed", |ms| ms.iter().all(|m| m.state.is_gone()))
        .await;
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
async fn a_stop_the_provider_refuses_fails_the_machine_which_is_destroyed() {
    let r = rig_launching(warm(), None, |_| None);
    let job = r.job(7);
    let m = r.serving_machine().await;
    let token = r.launcher.launched()[0].token.clone();
    run_job(&r, &token, job).await;
    r.controller.step().await;
    // Still creating, says the provider (a lagging view): the fake refuses to stop it.
    r.provider
        .set_state(&m.provider_id.clone().unwrap(), ProviderState::Creating);
    r.clock.advance(Duration::from_secs(600));
    r.controller.step().await;
    r.until("failed", |ms| ms[0].state == MachineState::Failed)
        .await;
    r.controller.step().await;
    r.until("destroyed", |ms| ms[0].state.is_gone()).await;
    assert!(r.sidecars.authenticate(&token).is_none(), "token revoked");
    let gone = r.machines.get(&m.id).unwrap();
    assert!(
        gone.reason
            .as_deref()
            .unwrap_or("")
            .starts_with("stop failed"),
        "{:?}",
        gone.reason
    );
}
