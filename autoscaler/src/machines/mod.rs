//! A pool's machines: their records (persisted on every transition, logged with old and new
//! state) and the calls that move them through their lifecycle (`lifecycle.rs`).

mod controller;
mod create;
mod gate;
mod health;
mod launch;
mod learning;
mod lifecycle;
mod pipelines;
mod policy;
mod power;
mod queries;
mod reconcile;
mod scale;
mod sources;
mod teardown;

pub use controller::{ControllerSettings, PoolController};
pub use lifecycle::Reclaim;
pub use sources::{SOURCE_LABEL, SourceSpec};

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod power_tests;
#[cfg(test)]
mod sources_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod user_data_tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::core::Millis;
use crate::core::breaker::BreakerState;
use crate::core::machine::{InvalidTransition, MachineEvent, MachineState, transition};
use crate::core::reconcile::{OrphanPolicy, Policy};
use crate::provisioner::Labels;
use crate::store::{MachineRecord, Store, StoreError, TimelineEntry};

/// Most timeline entries kept per machine.
const TIMELINE_LIMIT: usize = 32;
/// How long a gone machine's record is kept, for the summary and late questions.
const GONE_RETENTION_MS: Millis = 60 * 60 * 1000;

#[derive(Debug, thiserror::Error)]
pub enum MachinesError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    #[error("machine {0} is not known")]
    Unknown(String),
}

/// What a pool's machine service needs to know, from its configuration.
#[derive(Debug, Clone)]
pub struct MachinesSettings {
    pub pool: String,
    pub autoscaler_id: String,
    pub ssh_public_key: String,
    pub boot_timeout: Duration,
    pub ready_timeout: Duration,
    pub orphans: OrphanPolicy,
    /// Sidecars start from each machine's own user-data (`start = "user_data"`): a provisioner
    /// must declare `machine_user_data`, or its machines would never start one.
    pub needs_machine_user_data: bool,
}

#[derive(Debug)]
pub struct PoolMachines {
    settings: MachinesSettings,
    /// Where machines come from, in the order they are tried (at least one).
    sources: Vec<sources::Source>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    table: Mutex<BTreeMap<String, MachineRecord>>,
    changed: watch::Sender<u64>,
    timings: Mutex<PassTimings>,
    /// Machines the store had as `requested` when the pool was loaded: their creates were
    /// asked by an earlier run, which stopped before the answer (this run asks creates only
    /// of machines it records itself).
    interrupted_creates: std::collections::BTreeSet<String>,
    /// Called with a machine's id when it starts to boot (set by the pool's controller).
    on_booting: std::sync::OnceLock<BootingHook>,
}

/// What is done with a machine that starts to boot: its sidecar is started at once, not at the
/// next pass, which waits for every create of the pass that made it.
struct BootingHook(Box<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for BootingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BootingHook")
    }
}

/// How long the pool's last control passes took, for operators (`GET /pools`) and the
/// footprint benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PassTimings {
    /// The last reconcile against the provisioner's `list` (the script's run included).
    pub reconcile_ms: f64,
    /// The last pass over the pool's machines (health, injection, teardown, scaling).
    pub pass_ms: f64,
    pub reconciles: u64,
    pub passes: u64,
}

impl PoolMachines {
    /// The pool's machines as the store knows them.
    pub fn load(
        settings: MachinesSettings,
        sources: Vec<SourceSpec>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, StoreError> {
        let table: BTreeMap<String, MachineRecord> = store
            .machines()?
            .into_iter()
            .filter(|m| m.pool == settings.pool)
            .map(|m| (m.id.clone(), m))
            .collect();
        let interrupted_creates = table
            .values()
            .filter(|m| m.state == MachineState::Requested)
            .map(|m| m.id.clone())
            .collect();
        let now = clock.now();
        assert!(!sources.is_empty(), "a pool with machines has a source");
        Ok(Arc::new(Self {
            settings,
            sources: sources
                .into_iter()
                .map(|spec| sources::Source::new(spec, now))
                .collect(),
            store,
            clock,
            table: Mutex::new(table),
            changed: watch::Sender::new(0),
            on_booting: std::sync::OnceLock::new(),
            timings: Mutex::new(PassTimings::default()),
            interrupted_creates,
        }))
    }

    /// The store the pool's machines are kept in (the controller keeps its learning there).
    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn pool(&self) -> &str {
        &self.settings.pool
    }

    pub fn now(&self) -> Millis {
        self.clock.now()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, MachineRecord>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Woken on every change of any machine.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A number that grows with every change of any machine of the pool.
    pub fn version(&self) -> u64 {
        *self.changed.borrow()
    }

    /// Whether the pool can have new machines: closed while any source's breaker is; else the
    /// first source's state (when it reopens).
    pub fn breaker(&self) -> BreakerState {
        let now = self.clock.now();
        let states: Vec<BreakerState> = self.sources.iter().map(|s| s.breaker(now)).collect();
        if states.iter().any(|s| matches!(s, BreakerState::Closed)) {
            return BreakerState::Closed;
        }
        states.into_iter().next().unwrap_or(BreakerState::Closed)
    }

    /// The source that made `m` (records from before sources existed: the first).
    fn source_of(&self, m: &MachineRecord) -> &sources::Source {
        self.source_named(&m.source)
    }

    fn source_named(&self, name: &str) -> &sources::Source {
        self.sources
            .iter()
            .find(|s| s.name() == name)
            .unwrap_or(&self.sources[0])
    }

    /// The sources' names, in order.
    pub fn source_names(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.name().to_string()).collect()
    }

    /// The labels every machine of this pool carries at the provider.
    pub fn owner_labels(&self) -> Labels {
        Labels::from([
            (
                "autoscaler-id".to_string(),
                self.settings.autoscaler_id.clone(),
            ),
            ("autoscaler-pool".to_string(), self.settings.pool.clone()),
        ])
    }

    pub fn reconcile_policy(&self) -> Policy {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Policy {
            boot_timeout: ms(self.settings.boot_timeout),
            ready_timeout: ms(self.settings.ready_timeout),
            list_grace: 60_000,
            orphans: self.settings.orphans,
        }
    }

    /// Applies `event` to machine `id`: persisted and logged when the state changes.
    pub fn apply(
        &self,
        id: &str,
        event: MachineEvent,
        reason: &str,
    ) -> Result<(MachineState, MachineState), MachinesError> {
        let now = self.clock.now();
        let (before, after) = {
            let mut table = self.lock();
            let m = table
                .get_mut(id)
                .ok_or_else(|| MachinesError::Unknown(id.to_string()))?;
            let before = m.state;
            let after = transition(before, &event, now)?;
            if after != before {
                let mut updated = m.clone();
                updated.state = after;
                updated.since = now;
                // `reason` says why the machine left service (the first step out, or a failure);
                // later notes such as "drained" go to the timeline only.
                let out = |s| {
                    matches!(
                        s,
                        MachineState::Draining | MachineState::Destroying | MachineState::Failed
                    )
                };
                let leaving = after == MachineState::Failed || (out(after) && !out(before));
                if !reason.is_empty() && (leaving || updated.reason.is_none()) {
                    updated.reason = Some(reason.to_string());
                }
                updated.timeline.push(TimelineEntry {
                    at: now,
                    state: after,
                    reason: (!reason.is_empty()).then(|| reason.to_string()),
                });
                let excess = updated.timeline.len().saturating_sub(TIMELINE_LIMIT);
                updated.timeline.drain(..excess);
                self.store.put_machine(&updated)?;
                *m = updated;
            }
            (before, after)
        };
        if before != after {
            tracing::info!(pool = %self.settings.pool, machine.id = %id, from = %before, to = %after, reason, "machine state changed");
            self.bump();
            if after == MachineState::Booting
                && let Some(hook) = self.on_booting.get()
            {
                (hook.0)(id);
            }
        }
        Ok((before, after))
    }

    /// Has `hook` called with the id of each machine that starts to boot, after its record
    /// says so. Set once.
    pub fn on_booting(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.on_booting.set(BootingHook(Box::new(hook)));
    }

    /// Changes fields of a machine's record (not its state), persisted.
    pub fn update(
        &self,
        id: &str,
        change: impl FnOnce(&mut MachineRecord),
    ) -> Result<(), MachinesError> {
        {
            let mut table = self.lock();
            let m = table
                .get_mut(id)
                .ok_or_else(|| MachinesError::Unknown(id.to_string()))?;
            let mut updated = m.clone();
            change(&mut updated);
            self.store.put_machine(&updated)?;
            *m = updated;
        }
        self.bump();
        Ok(())
    }

    /// Adds a new machine record in `state`, persisted.
    fn insert(&self, record: MachineRecord) -> Result<(), MachinesError> {
        self.store.put_machine(&record)?;
        tracing::info!(pool = %self.settings.pool, machine.id = %record.id, state = %record.state, "machine recorded");
        self.lock().insert(record.id.clone(), record);
        self.bump();
        Ok(())
    }

    /// A new machine record. Ids are unique per store, so also across restarts.
    fn new_record(&self, state: MachineState) -> Result<MachineRecord, MachinesError> {
        let n = self.store.next_id()?;
        let now = self.clock.now();
        Ok(MachineRecord {
            id: format!("{}-{n}", self.settings.pool),
            pool: self.settings.pool.clone(),
            state,
            since: now,
            created_at: now,
            source: String::new(),
            class: None,
            provider_id: None,
            endpoint: None,
            host_key: None,
            sidecar: None,
            use_count: 0,
            reason: None,
            destroy_attempts: 0,
            next_attempt: 0,
            restarted_at: None,
            timeline: vec![TimelineEntry {
                at: now,
                state,
                reason: None,
            }],
        })
    }

    /// Forgets machines gone for longer than the retention.
    pub fn collect_gone(&self) -> Result<usize, MachinesError> {
        let now = self.clock.now();
        let old: Vec<String> = self
            .lock()
            .values()
            .filter(|m| m.state.is_gone() && now.saturating_sub(m.since) >= GONE_RETENTION_MS)
            .map(|m| m.id.clone())
            .collect();
        for id in &old {
            self.store.remove_machine(id)?;
            self.lock().remove(id);
        }
        Ok(old.len())
    }

    /// The machine's sidecar asked for a job: if it was waiting for that, it is ready now.
    pub fn sidecar_polled(&self, id: &str) {
        if let Some(m) = self.get(id)
            && m.state == MachineState::Injecting
            && let Err(e) = self.apply(
                id,
                MachineEvent::SidecarPolled,
                "its sidecar asked for a job",
            )
        {
            tracing::warn!(pool = %self.settings.pool, machine.id = %id, error = %e, "cannot mark the machine ready");
        }
    }
}
