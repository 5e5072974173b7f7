//! Giving a booted machine its sidecar, through the pool's launcher: reach it (pinning the host
//! key seen first when the provider gave none), run the ready check, mint the machine's own
//! sidecar token, start the sidecar. The machine is ready when that sidecar first asks for a
//! job (`PoolMachines::sidecar_polled`).

use std::sync::Arc;

use super::controller::PoolController;
use crate::core::machine::{MachineEvent, MachineState};
use crate::launcher::LaunchTarget;
use crate::store::{HostKey, HostKeySource, MachineRecord};

impl PoolController {
    pub(super) fn start_injection(self: Arc<Self>, m: &MachineRecord) {
        {
            let mut injecting = self
                .injecting
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !injecting.insert(m.id.clone()) {
                return;
            }
        }
        let id = m.id.clone();
        let span = tracing::info_span!("inject", pool = %self.pool(), machine.id = %id);
        let task = async move {
            if let Err(reason) = self.inject(&id).await {
                // The sidecar may have polled, served jobs and been retired before the last
                // check ran: then the machine has moved on and there is nothing to fail.
                let still_injecting = self.machines.get(&id).is_some_and(|m| {
                    matches!(m.state, MachineState::Booting | MachineState::Injecting)
                });
                if !still_injecting {
                    tracing::debug!(pool = %self.pool(), machine.id = %id, %reason, "a late injection check failed after the machine moved on");
                    self.injecting
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&id);
                    return;
                }
                tracing::warn!(pool = %self.pool(), machine.id = %id, %reason, "injection failed; the machine is failed and will be replaced");
                if let Err(e) = self.machines.apply(&id, MachineEvent::Fail, &reason) {
                    tracing::warn!(pool = %self.pool(), machine.id = %id, error = %e, "cannot fail the machine");
                }
            }
            self.injecting
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&id);
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    /// Reach the machine, check readiness, give it its own sidecar token, start the sidecar.
    async fn inject(&self, id: &str) -> Result<(), String> {
        let m = self.machines.get(id).ok_or("the machine vanished")?;
        if !self.launcher.connects() {
            return self.await_boot_sidecar(&m);
        }
        let target = LaunchTarget::of(&m).ok_or("the provider gave no address")?;
        let session = self
            .launcher
            .open(&target, self.ready_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let step = async {
            if m.host_key.is_none() {
                let pinned = HostKey {
                    key: session.host_key().to_string(),
                    source: HostKeySource::FirstConnection,
                };
                tracing::info!(pool = %self.pool(), machine.id = %id, host_key = %pinned.key, "host key recorded on first connection; required from now on");
                self.machines
                    .update(id, |r| r.host_key = Some(pinned))
                    .map_err(|e| e.to_string())?;
            }
            session.ready().await.map_err(|e| e.to_string())?;
            self.machines
                .apply(id, MachineEvent::Reachable, "reachable")
                .map_err(|e| e.to_string())?;
            let (sidecar, token) = self
                .sidecars
                .register(
                    self.pool(),
                    Some(format!("machine {id}")),
                    Some(id.to_string()),
                )
                .await
                .map_err(|e| e.to_string())?;
            self.machines
                .update(id, |r| r.sidecar = Some(sidecar.id()))
                .map_err(|e| e.to_string())?;
            let pid = session.start(id, &token).await.map_err(|e| e.to_string())?;
            tracing::info!(pool = %self.pool(), machine.id = %id, sidecar.id = %sidecar.id(), pid, "sidecar started; waiting for its first job request");
            Ok::<(), String>(())
        };
        let result = step.await;
        session.close().await;
        result
    }
}

impl PoolController {
    /// A machine that starts its sidecar from user-data: nothing to do but wait for the first
    /// poll. The sidecar may have polled already while the provider still said `creating`.
    fn await_boot_sidecar(&self, m: &MachineRecord) -> Result<(), String> {
        let sidecar = m.sidecar.ok_or(
            "it has no sidecar prepared (an adopted machine cannot be given one without a connection)",
        )?;
        self.machines
            .apply(
                &m.id,
                MachineEvent::Reachable,
                "its sidecar starts from user-data",
            )
            .map_err(|e| e.to_string())?;
        let polled = self.queue.has_waiter(sidecar)
            || self
                .sidecars
                .by_id(sidecar)
                .is_some_and(|s| s.last_seen().is_some());
        if polled {
            self.machines.sidecar_polled(&m.id);
        }
        Ok(())
    }
}
