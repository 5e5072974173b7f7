//! A machine's end as the controller drives it: its sidecar stopped over its connection, its
//! token revoked, then the machine destroyed (one teardown a machine at a time, in the
//! background), and every machine of the pool at shutdown with `delete_on_shutdown`.

use std::sync::Arc;
use std::time::Duration;

use super::controller::PoolController;
use crate::core::machine::MachineEvent;
use crate::store::MachineRecord;

/// Stopping a sidecar before its machine is destroyed is a courtesy, bounded.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

impl PoolController {
    /// Tears a machine down in the background, once.
    pub(super) fn start_teardown(self: Arc<Self>, m: &MachineRecord) {
        {
            let mut busy = self
                .tearing_down
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !busy.insert(m.id.clone()) {
                return;
            }
        }
        let m = m.clone();
        let span = tracing::info_span!("teardown", pool = %self.pool(), machine.id = %m.id);
        let task = async move {
            self.teardown(&m).await;
            self.tearing_down
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&m.id);
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    /// Destroys every machine of the pool (`delete_on_shutdown`), within `within`.
    pub async fn retire_all(self: Arc<Self>, within: Duration) {
        let all = self.machines.live();
        tracing::info!(pool = %self.pool(), machines = all.len(), "destroying the pool's machines (delete_on_shutdown)");
        let teardowns = all.iter().map(|m| {
            let this = self.clone();
            async move {
                let _ = this.machines.apply(
                    &m.id,
                    MachineEvent::Destroy,
                    "autoscaler shut down (delete_on_shutdown)",
                );
                this.teardown(m).await;
            }
        });
        if tokio::time::timeout(within, futures::future::join_all(teardowns))
            .await
            .is_err()
        {
            tracing::warn!(pool = %self.pool(), "not every machine was destroyed before the deadline; the next start finishes the job");
        }
    }

    /// Stops the sidecar (best effort), revokes its token, destroys the machine.
    async fn teardown(&self, m: &MachineRecord) {
        self.stop_sidecar(m).await;
        self.revoke(m).await;
        let reason = m.reason.clone().unwrap_or_default();
        if let Err(e) = self.machines.retire(&m.id, &reason).await {
            tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot destroy the machine");
        }
    }

    /// Ends the machine's sidecar over its connection, best effort and bounded: the machine is
    /// about to be destroyed or stopped, and its token revoked either way.
    pub(super) async fn stop_sidecar(&self, m: &MachineRecord) {
        if let Some(target) = crate::launcher::LaunchTarget::of(m)
            && m.sidecar.is_some()
        {
            let stop = self.launcher.stop(&target, STOP_TIMEOUT);
            if let Err(e) = tokio::time::timeout(STOP_TIMEOUT, stop)
                .await
                .unwrap_or(Ok(()))
            {
                tracing::debug!(pool = %self.pool(), machine.id = %m.id, error = %e, "could not stop the sidecar");
            }
        }
    }

    /// The machine's sidecar token stops working.
    pub(super) async fn revoke(&self, m: &MachineRecord) {
        if let Some(sidecar) = m.sidecar {
            self.last_project
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&sidecar);
            match self.sidecars.revoke_id(sidecar).await {
                Ok(true) => {
                    tracing::info!(pool = %self.pool(), machine.id = %m.id, sidecar.id = %sidecar, "sidecar token revoked")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot revoke the sidecar token")
                }
            }
        }
    }
}
