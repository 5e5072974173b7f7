//! Creating machines: each of the pool's sources asked in order, as its maximum, throttle and
//! circuit breaker allow; a create that failed settled against `list`; the breaker told of each
//! provisioner call's outcome.

use std::collections::HashMap;

use super::{MachinesError, PoolMachines, sources};
use crate::core::breaker::BreakerState;
use crate::core::classes::MachineClass;
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::reconcile::ProviderState;
use crate::launcher::SidecarLauncher;
use crate::provisioner::{CreateItem, CreateRequest, ProvisionerError};
use crate::secret::Secret;

impl PoolMachines {
    /// Asks the pool's sources, in order, for up to `wanted` machines, as each one's maximum,
    /// throttle and circuit breaker allow. Returns how many were asked for.
    pub async fn create(&self, wanted: u32) -> Result<u32, MachinesError> {
        self.create_of(wanted, None, None).await
    }

    /// Like [`PoolMachines::create`], for machines of `class` (from its sources only), each
    /// machine's sidecar prepared by `launcher` first when it starts from user-data (its token
    /// is minted before the provider hears of the machine).
    pub async fn create_of(
        &self,
        wanted: u32,
        class: Option<&MachineClass>,
        launcher: Option<&dyn SidecarLauncher>,
    ) -> Result<u32, MachinesError> {
        let now = self.clock.now();
        let mut left = wanted;
        let mut asked = Vec::new();
        let mut user_data = HashMap::new();
        let allowed = |name: &str| {
            class.is_none_or(|c| c.sources.is_empty() || c.sources.iter().any(|s| s == name))
        };
        let mut tried = 0;
        for source in &self.sources {
            if left == 0 {
                break;
            }
            if !allowed(source.name()) {
                continue;
            }
            tried += 1;
            let live = self.live_from(source.name());
            let grant = source.grant(left, live, now);
            let sources::Grant::Machines(n) = grant else {
                tracing::debug!(pool = %self.pool(), source = source.name(), why = grant.why_not(), "source gives no machine now");
                continue;
            };
            if tried > 1 {
                tracing::info!(pool = %self.pool(), source = source.name(), machines = n, reason = "overflow",
                    "machines come from a later source: the ones before are full, paused or throttled");
            }
            let mut ids = Vec::new();
            for _ in 0..n {
                let mut record = self.new_record(MachineState::Requested)?;
                record.source = source.name().to_string();
                record.class = class.map(|c| c.name.clone());
                if let Some(launcher) = launcher {
                    match launcher.prepare(&record.id).await {
                        Ok(Some(p)) => {
                            record.sidecar = Some(p.sidecar);
                            user_data.insert(record.id.clone(), p.user_data);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(pool = %self.pool(), machine.id = %record.id, error = %e, "cannot prepare the machine's sidecar; not creating it");
                            break;
                        }
                    }
                }
                ids.push(record.id.clone());
                self.insert(record)?;
            }
            let made = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            if made > 0 {
                asked.push((source, ids));
            }
            left -= made;
            if made < n {
                break;
            }
        }
        if asked.is_empty() {
            return Ok(0);
        }
        // A machine we ask for must be in the store before the provider hears of it: after a
        // crash, its key finds it again.
        self.store.durable().await?;
        let user_data = &user_data;
        let calls = asked.iter().flat_map(|(source, ids)| {
            ids.chunks(source.batch())
                .map(|batch| self.create_batch(source, batch.to_vec(), user_data))
        });
        futures::future::join_all(calls).await;
        Ok(wanted - left)
    }

    /// Live machines made by the source named `name`.
    fn live_from(&self, name: &str) -> u32 {
        let first = self.sources[0].name() == name;
        let n = self
            .lock()
            .values()
            .filter(|m| !m.state.is_gone())
            .filter(|m| m.source == name || (first && m.source.is_empty()))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The labels of a machine `source` makes: the owner labels and the source's name.
    fn source_labels(&self, source: &sources::Source) -> crate::provisioner::Labels {
        let mut labels = self.owner_labels();
        labels.insert(sources::SOURCE_LABEL.into(), source.name().to_string());
        labels
    }

    async fn create_batch(
        &self,
        source: &sources::Source,
        ids: Vec<String>,
        user_data: &HashMap<String, Secret>,
    ) {
        let mut labels = self.source_labels(source);
        let machines = ids
            .iter()
            .map(|id| {
                labels.insert("autoscaler-key".into(), id.clone());
                CreateItem {
                    key: id.clone(),
                    labels: labels.clone(),
                    user_data: user_data.get(id).cloned(),
                }
            })
            .collect();
        let request = CreateRequest {
            machines,
            ssh_public_key: self.settings.ssh_public_key.clone(),
            user_data: source.spec.user_data.clone(),
        };
        match source.provisioner().create(request).await {
            Ok(created) => {
                self.provisioner_succeeded(source);
                let mut running = Vec::new();
                for c in created {
                    let event = match c.state {
                        ProviderState::Running => MachineEvent::ProviderRunning,
                        _ => MachineEvent::CreateAccepted,
                    };
                    let bound = self.update(&c.key, |m| m.provider_id = Some(c.id.clone()));
                    if let Err(e) =
                        bound.and_then(|()| self.apply(&c.key, MachineEvent::CreateAccepted, ""))
                    {
                        tracing::warn!(pool = %self.pool(), machine.id = %c.key, error = %e, "cannot record a created machine");
                        continue;
                    }
                    if event == MachineEvent::ProviderRunning {
                        running.push(c.key);
                    }
                }
                // Their addresses at once, side by side: a machine does not wait for the
                // others' `status` calls before its sidecar can be started.
                futures::future::join_all(running.iter().map(|key| self.refresh_running(key)))
                    .await;
            }
            Err(e) => {
                self.provisioner_failed(source, &e, "create");
                if !matches!(e, ProvisionerError::TimedOut(_)) {
                    // The call failed without running out of time: most likely nothing was made.
                    // Ask `list` rather than guess, so that these machines stop counting against
                    // the maximum at once if they do not exist.
                    self.settle_failed_create(source, &ids, &e.to_string())
                        .await;
                }
            }
        }
    }

    /// After a failed create: machines the provider lists by key are ours; the others never
    /// existed.
    async fn settle_failed_create(&self, source: &sources::Source, ids: &[String], why: &str) {
        let Ok(listed) = source.provisioner().list(self.owner_labels()).await else {
            return; // The reconcile pass will decide, by key or by timeout.
        };
        for id in ids {
            let found = listed
                .iter()
                .find(|l| l.labels.get("autoscaler-key") == Some(id));
            let result = match found {
                Some(l) => self
                    .update(id, |m| m.provider_id = Some(l.id.clone()))
                    .and_then(|()| self.apply(id, MachineEvent::CreateAccepted, "")),
                None => self.apply(
                    id,
                    MachineEvent::ProviderGone,
                    &format!("create failed: {why}"),
                ),
            };
            if let Err(e) = result {
                tracing::warn!(pool = %self.pool(), machine.id = %id, error = %e, "cannot settle a failed create");
            }
        }
    }

    pub(super) fn provisioner_succeeded(&self, source: &sources::Source) {
        let mut g = source.guards();
        if !matches!(g.breaker.state(self.clock.now()), BreakerState::Closed) {
            tracing::info!(pool = %self.pool(), source = source.name(), "provisioner answers again; source resumed");
        }
        g.breaker.success();
    }

    pub(super) fn provisioner_failed(
        &self,
        source: &sources::Source,
        e: &ProvisionerError,
        verb: &str,
    ) {
        let now = self.clock.now();
        if let ProvisionerError::RetryLater { retry_after, .. } = e {
            let wait = retry_after.map_or(sources::RETRY_LATER_MS, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            });
            source.retry_later(now.saturating_add(wait));
        }
        let mut g = source.guards();
        let reason = format!("{verb}: {e}");
        let opened = if e.is_permanent() {
            g.breaker.open(now, &reason);
            true
        } else {
            g.breaker.failure(now, &reason)
        };
        if opened {
            if let BreakerState::Open { until, .. } = g.breaker.state(now) {
                tracing::error!(pool = %self.pool(), source = source.name(), %reason, paused_for_s = until.saturating_sub(now) / 1000,
                    "provisioner keeps failing; source paused (no new machines from it; existing ones keep working)");
            }
        } else {
            tracing::warn!(pool = %self.pool(), source = source.name(), %reason, "provisioner call failed");
        }
    }
}
