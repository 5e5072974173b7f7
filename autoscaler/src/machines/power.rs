//! The warm pool's decisions (`core::scaler::warm`), carried out.
//!
//! - **Stop.** An idle machine leaves service (`stopping`: no job is handed to it), its sidecar
//!   is ended and its token revoked (a stopped disk must not hold a live credential), then the
//!   provider's `stop` is asked. It is `stopped` once the provider says so (here, or in a later
//!   reconcile pass).
//! - **Start.** A stopped machine is `starting` until the provider reports it running; then it
//!   goes the way a new machine does (`booting`, `injecting`): reached again with its pinned host
//!   key and given a fresh sidecar with a fresh token. It counts as capacity only once that
//!   sidecar polls.
//!
//! A stop or start that fails fails the machine (destroyed and replaced): a half-stopped machine
//! is neither capacity nor a warm spare. One the provider never finishes is failed by the
//! reconcile pass after the boot timeout.

use std::sync::Arc;

use super::PoolMachines;
use super::controller::PoolController;
use super::policy::reason_code;
use crate::core::machine::MachineEvent;
use crate::core::scaler::Retire;
use crate::provisioner::{StartAnswer, StopAnswer};
use crate::store::MachineRecord;

impl PoolController {
    /// Whether the pool can keep stopped machines: every source's provisioner declares
    /// `stop_start` (unknown until the first reconcile pass has read their `info`: no).
    pub(super) fn can_stop_start(&self) -> bool {
        self.machines.sources.iter().all(|s| s.can_stop_start())
    }

    /// Takes idle `r.id` out of service and stops it in the background.
    pub(super) fn stop_idle(self: &Arc<Self>, r: &Retire) {
        let why = format!("{}: {}", reason_code(r.reason), r.detail);
        let Some(m) = self.machines.get(&r.id) else {
            return;
        };
        // A hand-out may have taken it since the plan looked: then it is busy and stays.
        if let Err(e) = self.machines.apply(&r.id, MachineEvent::Stop, &why) {
            tracing::debug!(pool = %self.pool(), machine.id = %r.id, error = %e, "not stopped: it changed since the plan");
            return;
        }
        tracing::info!(pool = %self.pool(), machine.id = %r.id, reason = %why, "stopping an idle machine (warm pool)");
        let this = self.clone();
        let span = tracing::info_span!("stop", pool = %self.pool(), machine.id = %r.id);
        let task = async move { this.stop_machine(&m).await };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    async fn stop_machine(&self, m: &MachineRecord) {
        self.stop_sidecar(m).await;
        self.revoke(m).await;
        let stopped = match self.machines.update(&m.id, |r| r.sidecar = None) {
            Ok(()) => self.machines.stop_at_provider(&m.id).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(reason) = stopped {
            self.fail_power_step(&m.id, &format!("stop failed: {reason}"));
        }
    }

    /// Starts stopped `r.id` in the background.
    pub(super) fn start_stopped(self: &Arc<Self>, r: &Retire) {
        let why = format!("{}: {}", reason_code(r.reason), r.detail);
        let now = self.machines.now();
        let started = self
            .machines
            .apply(&r.id, MachineEvent::Start, &why)
            .and_then(|_| self.machines.update(&r.id, |m| m.restarted_at = Some(now)));
        if let Err(e) = started {
            tracing::warn!(pool = %self.pool(), machine.id = %r.id, error = %e, "cannot start the stopped machine");
            return;
        }
        tracing::info!(pool = %self.pool(), machine.id = %r.id, reason = %why, "starting a stopped machine (warm pool)");
        let this = self.clone();
        let id = r.id.clone();
        let span = tracing::info_span!("start", pool = %self.pool(), machine.id = %r.id);
        let task = async move {
            if let Err(reason) = this.machines.start_at_provider(&id).await {
                this.fail_power_step(&id, &format!("start failed: {reason}"));
            }
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    fn fail_power_step(&self, id: &str, reason: &str) {
        tracing::warn!(pool = %self.pool(), machine.id = %id, %reason, "the machine is failed and will be replaced");
        if let Err(e) = self.machines.apply(id, MachineEvent::Fail, reason) {
            tracing::warn!(pool = %self.pool(), machine.id = %id, error = %e, "cannot fail the machine");
        }
    }
}

impl PoolMachines {
    /// Asks the provider to stop `id` (already `stopping`, its sidecar's token revoked).
    pub(super) async fn stop_at_provider(&self, id: &str) -> Result<(), String> {
        let (machine, provider_id) = self.with_provider_id(id)?;
        // The decision is on disk before the provider acts on it.
        self.store.durable().await.map_err(|e| e.to_string())?;
        let source = self.source_of(&machine);
        match source.provisioner().stop(&provider_id).await {
            Ok(StopAnswer::Stopped) => self
                .apply(id, MachineEvent::ProviderStopped, "stopped")
                .map(|_| ())
                .map_err(|e| e.to_string()),
            // The reconcile pass sees it through to `stopped` (or fails it at the boot timeout).
            Ok(StopAnswer::Stopping) => Ok(()),
            Ok(StopAnswer::Gone) => self.found_gone(id, "stop"),
            Err(e) => {
                self.provisioner_failed(source, &e, "stop");
                Err(e.to_string())
            }
        }
    }

    /// Asks the provider to start `id` (already `starting`); once it runs, records where to
    /// reach it (a start may give it a new address) and moves it to `booting`.
    pub(super) async fn start_at_provider(&self, id: &str) -> Result<(), String> {
        let (machine, provider_id) = self.with_provider_id(id)?;
        self.store.durable().await.map_err(|e| e.to_string())?;
        let source = self.source_of(&machine);
        match source.provisioner().start(&provider_id).await {
            Ok(StartAnswer::Running) => {
                self.refresh_running(id).await;
                Ok(())
            }
            // The reconcile pass sees it running (or fails it at the boot timeout).
            Ok(StartAnswer::Starting) => Ok(()),
            Ok(StartAnswer::Gone) => self.found_gone(id, "start"),
            Err(e) => {
                self.provisioner_failed(source, &e, "start");
                Err(e.to_string())
            }
        }
    }

    fn found_gone(&self, id: &str, verb: &str) -> Result<(), String> {
        let reason = format!("vanished at the provider: {verb} found it gone");
        self.apply(id, MachineEvent::ProviderGone, &reason)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn with_provider_id(&self, id: &str) -> Result<(MachineRecord, String), String> {
        let machine = self.get(id).ok_or("the machine vanished")?;
        let provider_id = machine.provider_id.clone().ok_or("it has no provider id")?;
        Ok((machine, provider_id))
    }
}
