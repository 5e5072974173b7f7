//! Reconciling with each source's `list`: machines the provider lost, creates we lost track
//! of, orphans (adopted or destroyed), spot reclaims.

use super::lifecycle::Reclaim;
use super::{MachinesError, PoolMachines, sources};
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::reconcile::{self, Action, Known, Listed};
use crate::provisioner::Capabilities;

impl PoolMachines {
    /// One reconcile pass per source: `list` against what we know, and the actions that
    /// follow. Returns the machines the provider is taking back (spot reclaims), still in
    /// service: the caller moves their jobs first, then takes them out with
    /// [`PoolMachines::reclaimed`].
    pub async fn reconcile(&self) -> Result<Vec<Reclaim>, MachinesError> {
        let mut reclaims = Vec::new();
        for source in &self.sources {
            reclaims.extend(self.reconcile_source(source).await?);
        }
        self.collect_gone()?;
        Ok(reclaims)
    }

    async fn reconcile_source(
        &self,
        source: &sources::Source,
    ) -> Result<Vec<Reclaim>, MachinesError> {
        if let Ok(info) = source.provisioner().info().await {
            source.set_batch(info.capabilities.batch_size());
            source.set_stop_start(info.capabilities.stop_start);
            self.judge_fitness(source, &info.capabilities);
        }
        let listed_at = self.clock.now();
        let listed = match source.provisioner().list(self.owner_labels()).await {
            Ok(listed) => {
                self.provisioner_succeeded(source);
                listed
            }
            Err(e) => {
                self.provisioner_failed(source, &e, "list");
                return Ok(Vec::new());
            }
        };
        // Two sources may share a cloud account: each judges only the machines it made (no
        // source label: made before sources existed, by the first).
        let first = self.sources[0].name() == source.name();
        let mine = |label: Option<&String>| match label {
            Some(name) => name == source.name(),
            None => first,
        };
        let listed: Vec<_> = listed
            .into_iter()
            .filter(|l| mine(l.labels.get(sources::SOURCE_LABEL)))
            .collect();
        let reclaims = self.reclaims(&listed);
        let listed: Vec<Listed> = listed
            .into_iter()
            .map(|l| Listed {
                provider_id: l.id,
                state: l.state,
                key: l.labels.get("autoscaler-key").cloned(),
            })
            .collect();
        let known: Vec<Known> = self
            .snapshot()
            .into_iter()
            .filter(|m| !m.state.is_gone())
            .filter(|m| m.source == source.name() || (first && m.source.is_empty()))
            .map(|m| Known {
                create_interrupted: m.state == MachineState::Requested
                    && self.interrupted_creates.contains(&m.id),
                id: m.id,
                state: m.state,
                provider_id: m.provider_id,
                created_at: m.created_at,
                since: m.since,
                next_attempt: m.next_attempt,
                changed_after_list: m.since > listed_at,
            })
            .collect();
        let now = self.clock.now();
        for action in reconcile::plan(&known, &listed, now, &self.reconcile_policy()) {
            match self.execute(source, action).await {
                // The plan was made from a snapshot; a teardown running meanwhile may have
                // moved the machine on (to gone, say), and what the plan said no longer
                // applies. That is no failure of the pass, whose other actions must still run.
                Err(MachinesError::Transition(e)) => {
                    tracing::debug!(pool = %self.pool(), error = %e, "a reconcile action no longer applies: the machine changed since the pass looked");
                }
                other => other?,
            }
        }
        Ok(reclaims)
    }

    /// The machines in service that `list` reports as being taken back.
    fn reclaims(&self, listed: &[crate::provisioner::ListedMachine]) -> Vec<Reclaim> {
        let machines = self.snapshot();
        listed
            .iter()
            .filter_map(|l| {
                let notice = l.interruption.clone()?;
                let machine = machines
                    .iter()
                    .find(|m| m.provider_id.as_deref() == Some(l.id.as_str()))?
                    .clone();
                let leaving = matches!(
                    machine.state,
                    MachineState::Failed | MachineState::Destroying | MachineState::Gone
                );
                (!leaving).then_some(Reclaim { machine, notice })
            })
            .collect()
    }

    /// A pool whose sidecars start from user-data cannot use a provisioner that ignores each
    /// machine's own user-data: its machines would boot, never start a sidecar, and fail after
    /// `ready_timeout`. Such a source makes no machine, and says so once.
    fn judge_fitness(&self, source: &sources::Source, capabilities: &Capabilities) {
        let lacking = self.settings.needs_machine_user_data && !capabilities.machine_user_data;
        let why = lacking.then(|| {
            "start = \"user_data\" needs a provisioner that declares the machine_user_data capability, and this one does not".to_string()
        });
        if source.set_unfit(why.clone()) {
            match why {
                Some(why) => {
                    tracing::error!(pool = %self.pool(), source = source.name(), reason = %why, "source makes no machine: its provisioner cannot start this pool's sidecars")
                }
                None => {
                    tracing::info!(pool = %self.pool(), source = source.name(), "source makes machines again: its provisioner now declares machine_user_data")
                }
            }
        }
    }

    /// A reclaimed machine leaves service at once (`Failed`): it is destroyed, and a running
    /// job it held fails without waiting for its sidecar to fall silent.
    pub fn reclaimed(&self, reclaim: &Reclaim) {
        let (m, notice) = (&reclaim.machine, &reclaim.notice);
        let deadline = notice.deadline.as_deref().unwrap_or("unknown");
        let reason = format!(
            "the provider takes it back ({}, deadline {deadline})",
            notice.reason
        );
        tracing::warn!(pool = %self.pool(), machine.id = %m.id, %reason, "machine reclaimed: its jobs go elsewhere or fail now");
        let source = self.source_of(m);
        if let Some(cooldown) = source.spec.reclaim_cooldown {
            let until = self
                .clock
                .now()
                .saturating_add(super::controller::ms(cooldown));
            source.retry_later(until);
            tracing::info!(pool = %self.pool(), source = source.name(), cooldown_s = cooldown.as_secs(),
                "the provider reclaims this source's machines: new machines come from the next sources meanwhile");
        }
        if let Err(e) = self.apply(&m.id, MachineEvent::Fail, &reason) {
            tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot take the reclaimed machine out of service");
        }
    }

    async fn execute(&self, source: &sources::Source, action: Action) -> Result<(), MachinesError> {
        match action {
            Action::Bind {
                machine,
                provider_id,
            } => {
                tracing::info!(pool = %self.pool(), machine.id = %machine, provider_id, "a create we lost track of made this machine; recording it");
                self.update(&machine, |m| m.provider_id = Some(provider_id))?;
                self.apply(&machine, MachineEvent::CreateAccepted, "found by its key")?;
            }
            Action::Event {
                machine,
                event: MachineEvent::ProviderRunning,
                ..
            } => self.refresh_running(&machine).await,
            Action::Event {
                machine,
                event,
                reason,
            } => {
                let destroy = event == MachineEvent::Destroy;
                self.apply(&machine, event, &reason)?;
                if destroy {
                    self.destroy(&machine).await?;
                }
            }
            Action::Destroy { machine } => self.destroy(&machine).await?,
            Action::Adopt { provider_id, key } => self.adopt(source, provider_id, key).await?,
            Action::DestroyOrphan { provider_id } => {
                tracing::warn!(pool = %self.pool(), source = source.name(), provider_id, "destroying a machine that carries our labels but that we do not know (orphan_policy = destroy)");
                if let Err(e) = source.provisioner().destroy(&provider_id).await {
                    self.provisioner_failed(source, &e, "destroy");
                }
            }
        }
        Ok(())
    }

    /// Takes over an orphan: it becomes a machine of the pool, booting.
    async fn adopt(
        &self,
        source: &sources::Source,
        provider_id: String,
        key: Option<String>,
    ) -> Result<(), MachinesError> {
        let mut record = self.new_record(MachineState::Creating)?;
        record.source = source.name().to_string();
        record.provider_id = Some(provider_id.clone());
        record.reason = Some(format!(
            "adopted (its key was {})",
            key.as_deref().unwrap_or("none")
        ));
        let id = record.id.clone();
        tracing::warn!(pool = %self.pool(), machine.id = %id, provider_id, "adopting a machine that carries our labels (orphan_policy = adopt)");
        self.insert(record)?;
        self.refresh_running(&id).await;
        Ok(())
    }
}
