//! Calls to the provisioner that move machines through their lifecycle after their create
//! (`create.rs`): refresh a machine that runs, destroy (retried with backoff until the provider
//! agrees it is gone), retire.

use std::time::Duration;

use super::{MachinesError, PoolMachines};
use crate::core::Millis;
use crate::core::backoff::Backoff;
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::reconcile::ProviderState;
use crate::provisioner::Destroyed;
use crate::store::{Endpoint, HostKey, HostKeySource, MachineRecord};

/// A machine the provider is taking back, and its notice.
#[derive(Debug, Clone)]
pub struct Reclaim {
    pub machine: MachineRecord,
    pub notice: crate::provisioner::Interruption,
}

/// Destroy retries: 1 s doubling to 5 min.
const DESTROY_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
/// How soon to look again at a machine the provider is still stopping.
const STOPPING_RECHECK_MS: Millis = 5_000;

impl PoolMachines {
    /// Asks `status` of a machine the provider reports running, records where to reach it, and
    /// moves it to `booting`.
    pub async fn refresh_running(&self, id: &str) {
        let Some(machine) = self.get(id) else {
            return;
        };
        let Some(provider_id) = machine.provider_id.clone() else {
            return;
        };
        let source = self.source_of(&machine);
        let status = match source.provisioner().status(&provider_id).await {
            Ok(s) => s,
            Err(e) => {
                self.provisioner_failed(source, &e, "status");
                return;
            }
        };
        let result = match status.state {
            ProviderState::Running => {
                let endpoint = status.address.map(|host| Endpoint {
                    host,
                    port: status.port,
                    user: status.user,
                });
                let host_key = status.host_key.map(|key| HostKey {
                    key,
                    source: HostKeySource::Provider,
                });
                self.update(id, |m| {
                    m.endpoint = endpoint;
                    if host_key.is_some() {
                        m.host_key = host_key;
                    }
                })
                .and_then(|()| self.apply(id, MachineEvent::ProviderRunning, ""))
                .map(|_| ())
            }
            ProviderState::Gone => self
                .apply(
                    id,
                    MachineEvent::ProviderGone,
                    "vanished at the provider: the provider reports it gone",
                )
                .map(|_| ()),
            ProviderState::Failed => self
                .apply(
                    id,
                    MachineEvent::Fail,
                    status
                        .message
                        .as_deref()
                        .unwrap_or("the provider reports it failed"),
                )
                .map(|_| ()),
            // Not usable yet, or no longer: the reconcile pass judges what the provider's list
            // says (a machine stopped behind the autoscaler's back is failed there).
            ProviderState::Creating
            | ProviderState::Stopping
            | ProviderState::Stopped
            | ProviderState::Starting => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(pool = %self.pool(), machine.id = %id, error = %e, "cannot record the machine's status");
        }
    }

    /// The state the provider's `status` gives a machine (judging a silent machine that the
    /// autoscaler does not connect to).
    pub async fn provider_state(&self, m: &MachineRecord) -> Result<ProviderState, String> {
        let provider_id = m.provider_id.as_deref().ok_or("it has no provider id")?;
        let source = self.source_of(m);
        match source.provisioner().status(provider_id).await {
            Ok(status) => Ok(status.state),
            Err(e) => {
                self.provisioner_failed(source, &e, "status");
                Err(format!("status failed: {e}"))
            }
        }
    }

    /// Destroys a machine (any live state): stops it getting work and asks the provider. A
    /// failed attempt is retried by later reconcile passes, with backoff, until the provider
    /// reports it gone.
    pub async fn destroy(&self, id: &str) -> Result<(), MachinesError> {
        let Some(machine) = self.get(id) else {
            return Err(MachinesError::Unknown(id.to_string()));
        };
        if machine.state.is_gone() {
            return Ok(());
        }
        if machine.state != MachineState::Destroying {
            self.apply(
                id,
                MachineEvent::Destroy,
                machine.reason.as_deref().unwrap_or(""),
            )?;
            // The decision is on disk before the provider acts on it.
            self.store.durable().await?;
        }
        let Some(provider_id) = machine.provider_id.clone() else {
            // Nothing to call: its create never answered. The reconcile pass binds it by key if
            // it appears, or declares it gone after the boot timeout.
            return Ok(());
        };
        let now = self.clock.now();
        let source = self.source_of(&machine);
        match source.provisioner().destroy(&provider_id).await {
            Ok(Destroyed::Gone) => {
                self.apply(id, MachineEvent::ProviderGone, "destroyed")?;
            }
            Ok(Destroyed::Stopping) => {
                self.update(id, |m| m.next_attempt = now + STOPPING_RECHECK_MS)?;
            }
            Err(e) => {
                self.provisioner_failed(source, &e, "destroy");
                let attempts = machine.destroy_attempts + 1;
                let mut backoff = DESTROY_BACKOFF;
                for _ in 1..attempts {
                    backoff.fail(None, 0.5);
                }
                let wait = backoff.fail(e.retry_after(), 0.5);
                let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(pool = %self.pool(), machine.id = %id, attempts, retry_in_s = wait.as_secs(), error = %e,
                    "destroy failed; will retry");
                self.update(id, |m| {
                    m.destroy_attempts = attempts;
                    m.next_attempt = now + wait_ms;
                })?;
            }
        }
        Ok(())
    }

    /// Marks a machine to be destroyed with `reason` (used by the scaler and by failure
    /// handling) and asks the provider.
    pub async fn retire(&self, id: &str, reason: &str) -> Result<(), MachinesError> {
        self.apply(id, MachineEvent::Destroy, reason)?;
        self.destroy(id).await
    }

    /// Live machines as the scaler sees them.
    pub fn live(&self) -> Vec<MachineRecord> {
        self.snapshot()
            .into_iter()
            .filter(|m| !m.state.is_gone())
            .collect()
    }
}
