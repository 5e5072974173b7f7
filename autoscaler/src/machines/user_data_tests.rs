//! The machine side with sidecars started from user-data, in-process: the real user-data
//! launcher and bootstrap script, the in-memory provisioner (which keeps each machine's
//! user-data as a provider would), the memory store and a clock moved by hand. The autoscaler
//! never connects to these machines: the sidecar's first poll makes one ready, and a silent one
//! is judged by the provider's `status`.

use std::sync::Arc;
use std::time::Duration;

use super::controller_tests::{Rig, on_demand, rig_launching};
use crate::config::{SidecarConfig, SidecarMode, SidecarStart};
use crate::core::machine::MachineState;
use crate::core::reconcile::ProviderState;
use crate::inject::Injector;
use crate::inject::bootstrap::token_written_by as token_in;
use crate::launcher::UserDataLauncher;
use crate::ssh::ClientKey;

fn rig(dir: &std::path::Path) -> Rig {
    let key = ClientKey::load_or_generate(None, dir).unwrap();
    rig_launching(on_demand(), None, move |sidecars| {
        let config = SidecarConfig {
            mode: SidecarMode::Command {
                template: "runner --url {url} --token {token}".into(),
            },
            start: SidecarStart::UserData,
            binary: None,
            remote_dir: "autoscaler-sidecar".into(),
            ready_command: None,
            ready_timeout: Duration::from_secs(300),
            silence_timeout: Duration::from_secs(120),
            token_binding: Default::default(),
            job_user: None,
        };
        let injector = Injector::new(key, config, "http://10.0.0.1:8090".into(), 1).unwrap();
        Some(Arc::new(UserDataLauncher::new(
            injector,
            sidecars.clone(),
            "linux",
        )))
    })
}

#[tokio::test]
async fn a_machine_made_with_its_bootstrap_is_ready_when_its_own_sidecar_polls() {
    let dir = tempfile::tempdir().unwrap();
    let r = rig(dir.path());
    let job = r.job(7);
    r.controller.step().await;
    let made = r.provider.machines();
    assert_eq!(made.len(), 1, "one machine for one job");
    let script = made
        .values()
        .next()
        .and_then(|m| m.user_data.clone())
        .expect("the machine is created with its own user-data");
    let token = token_in(script.expose());
    let sidecar = r
        .sidecars
        .authenticate(&token)
        .expect("the token in the user-data opens the mirrored API");
    assert_eq!(sidecar.pool(), "linux");
    let m = r.only_machine();
    assert_eq!(
        m.sidecar,
        Some(sidecar.id()),
        "the token is the machine's own"
    );

    // No connection is ever tried: the machine waits for its sidecar, however many passes run.
    r.controller.step().await;
    r.controller.step().await;
    r.until("waiting for its sidecar", |ms| {
        ms.iter().all(|m| m.state == MachineState::Injecting)
    })
    .await;

    // The sidecar's first job request makes the machine ready, and it takes the job.
    r.machines.sidecar_polled(&m.id);
    assert_eq!(r.machines.get(&m.id).unwrap().state, MachineState::Ready);
    let taken = r
        .queue
        .wait_for_job(sidecar.id(), None, Duration::from_secs(1))
        .await;
    assert_eq!(taken, Some(job));
    assert!(
        r.launcher.launched().is_empty(),
        "the SSH-style launcher is not used"
    );
}

#[tokio::test]
async fn a_silent_machine_is_judged_by_the_providers_status() {
    let dir = tempfile::tempdir().unwrap();
    let r = rig(dir.path());
    r.job(7);
    r.controller.step().await;
    let m = r.only_machine();
    r.controller.step().await;
    r.until("waiting for its sidecar", |ms| {
        ms.iter().all(|m| m.state == MachineState::Injecting)
    })
    .await;
    r.machines.sidecar_polled(&m.id);

    // Silent past the bound while the provider says it runs: kept, its silence forgiven (the
    // probe counts the provider's word as a sign of life).
    let sidecar = m.sidecar.unwrap();
    r.clock.advance(Duration::from_secs(121));
    let probed_at = r.machines.now();
    r.controller.step().await;
    let deadline = crate::clock::monotonic() + Duration::from_secs(10);
    while r.sidecars.by_id(sidecar).and_then(|s| s.last_seen()) != Some(probed_at) {
        assert!(
            crate::clock::monotonic() < deadline,
            "the silent machine was never probed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let alive = r.machines.get(&m.id).unwrap();
    assert!(
        matches!(alive.state, MachineState::Ready | MachineState::Busy),
        "a silent machine the provider runs is kept: {:?}",
        alive.state
    );

    // Silent again, and the provider says it failed: the machine is failed too.
    let provider_id = alive.provider_id.clone().unwrap();
    r.provider.set_state(&provider_id, ProviderState::Failed);
    r.clock.advance(Duration::from_secs(121));
    r.controller.step().await;
    r.until("failed", |ms| {
        ms.iter()
            .any(|x| x.id == m.id && (x.state == MachineState::Failed || x.state.is_gone()))
    })
    .await;
}
