//! When a machine dies: how it is noticed, and what happens to its jobs.
//!
//! A machine is lost when the provider says so (`list`, `status`: handled by reconcile), or when
//! its sidecar goes silent (no job request held, no call started, for longer than the pool's
//! `silence_timeout`) and a probe over SSH then finds the machine unreachable or the sidecar
//! process gone (for a pool that starts sidecars from user-data, the provider's `status` no
//! longer says running); a machine so lost that the provider's `status` reports gone has
//! vanished at the provider rather than failed. Silence alone is not enough: a runner backing off while GitLab is down is quiet
//! but alive. The jobs a lost machine had been handed but not accepted go to another machine;
//! the jobs it ran are failed at GitLab with `runner_interrupted` (`runner_system_failure`
//! where GitLab does not list that reason), so that CI `retry:` can rerun them.

use std::sync::Arc;
use std::time::Duration;

use super::controller::PoolController;
use crate::core::SidecarId;
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::reconcile::ProviderState;
use crate::store::MachineRecord;

/// How long a probe of a silent machine may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a probed machine no longer serves.
enum Lost {
    /// The provider's `status` reports it gone.
    Vanished(String),
    /// Anything else: the machine failed.
    Failed(String),
}

impl PoolController {
    /// How long a serving machine's sidecar has been silent, if past the bound.
    pub(super) fn silent(&self, m: &MachineRecord) -> Option<String> {
        if !matches!(
            m.state,
            MachineState::Ready | MachineState::Busy | MachineState::Draining
        ) {
            return None;
        }
        let sidecar = m.sidecar?;
        if self.queue.has_waiter(sidecar) {
            return None;
        }
        let seen = self
            .sidecars
            .by_id(sidecar)
            .and_then(|s| s.last_seen())
            .unwrap_or(m.since)
            .max(m.since);
        let silent_ms = self.machines.now().saturating_sub(seen);
        let bound = u64::try_from(self.silence_timeout.as_millis()).unwrap_or(u64::MAX);
        (silent_ms >= bound)
            .then(|| format!("its sidecar has been silent for {} s", silent_ms / 1000))
    }

    /// Checks a silent machine over SSH, in the background: lost if unreachable or if its
    /// sidecar process is gone; otherwise the silence is forgiven until the next bound.
    pub(super) fn start_probe(self: Arc<Self>, m: &MachineRecord, silence: String) {
        {
            let mut probing = self
                .probing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !probing.insert(m.id.clone()) {
                return;
            }
        }
        let m = m.clone();
        let span = tracing::info_span!("probe", pool = %self.machines.pool(), machine.id = %m.id);
        let task = async move {
            match self.probe(&m).await {
                Ok(()) => {
                    tracing::info!(pool = %self.machines.pool(), machine.id = %m.id, %silence, "silent sidecar is alive (probed)");
                    if let Some(s) = m.sidecar.and_then(|id| self.sidecars.by_id(id)) {
                        self.sidecars.note_seen(&s);
                    }
                }
                Err(lost) => {
                    let (event, reason) = match lost {
                        Lost::Vanished(why) => (
                            MachineEvent::ProviderGone,
                            format!(
                                "vanished at the provider: status found it gone ({silence}; {why})"
                            ),
                        ),
                        Lost::Failed(why) => (MachineEvent::Fail, format!("{silence}; {why}")),
                    };
                    tracing::warn!(pool = %self.machines.pool(), machine.id = %m.id, %reason, "machine lost");
                    if let Err(e) = self.machines.apply(&m.id, event, &reason) {
                        tracing::warn!(pool = %self.machines.pool(), machine.id = %m.id, error = %e, "cannot fail the machine");
                    }
                }
            }
            self.probing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&m.id);
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    /// Whether a silent machine still serves. A machine SSH cannot reach is asked about at the
    /// provider: one its `status` reports gone was deleted or reclaimed behind the
    /// autoscaler's back, which the operator should read as that, not as a failure of the
    /// machine (one SSH reached exists, so its provider is not asked).
    async fn probe(&self, m: &MachineRecord) -> Result<(), Lost> {
        if !self.launcher.connects() {
            return match self.machines.provider_state(m).await {
                Ok(ProviderState::Running) => Ok(()),
                Ok(ProviderState::Gone) => {
                    Err(Lost::Vanished("the provider reports it gone".into()))
                }
                Ok(other) => Err(Lost::Failed(format!("the provider reports it {other:?}"))),
                Err(e) => Err(Lost::Failed(e)),
            };
        }
        let Some(target) = crate::launcher::LaunchTarget::of(m) else {
            return Err(Lost::Failed("it has no address".into()));
        };
        match self.launcher.alive(&target, PROBE_TIMEOUT).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Lost::Failed("its sidecar process is gone".into())),
            Err(e) => {
                let why = format!("cannot reach it or check its sidecar: {e}");
                match self.machines.provider_state(m).await {
                    Ok(ProviderState::Gone) => Err(Lost::Vanished(why)),
                    _ => Err(Lost::Failed(why)),
                }
            }
        }
    }

    /// A machine that left service (failed, being destroyed, gone) gives up its jobs.
    pub(super) fn release_jobs(&self, m: &MachineRecord, sidecar: SidecarId) {
        let reason = format!(
            "machine {} {}",
            m.id,
            m.reason.as_deref().map_or_else(
                || m.state.name().to_string(),
                |r| format!("{}: {r}", m.state)
            )
        );
        match self.jobs.lose_sidecar(sidecar, &reason) {
            Ok(requeued) => {
                for id in requeued {
                    tracing::warn!(pool = %self.machines.pool(), machine.id = %m.id, job.id = %id,
                        "the job was handed to a machine that is gone before it started; offering it to another");
                    self.queue.offer(id);
                }
            }
            Err(e) => {
                tracing::error!(pool = %self.machines.pool(), machine.id = %m.id, error = %e, "cannot release the machine's jobs")
            }
        }
    }

    /// After a restart: a machine whose sidecar was registered but not yet seen polling waits
    /// for it (it was probably started before the crash) instead of being injected again, which
    /// would start a second sidecar. If it never polls, the ready timeout fails the machine.
    pub fn recover(&self) {
        for m in self.machines.live() {
            let Some(sidecar) = self.sidecars.for_machine(&m.id) else {
                continue;
            };
            let result = (|| {
                if m.sidecar != Some(sidecar.id()) {
                    self.machines
                        .update(&m.id, |r| r.sidecar = Some(sidecar.id()))?;
                }
                if m.state == MachineState::Booting {
                    self.machines.apply(
                        &m.id,
                        MachineEvent::Reachable,
                        "autoscaler restarted; waiting for its sidecar",
                    )?;
                }
                Ok::<(), super::MachinesError>(())
            })();
            if let Err(e) = result {
                tracing::warn!(pool = %self.machines.pool(), machine.id = %m.id, error = %e, "cannot recover the machine's state");
            }
        }
    }
}
