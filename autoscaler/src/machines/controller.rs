//! The control loop of a pool with machines: level-triggered, woken by a timer or by changes of
//! jobs and machines. Each pass reconciles with the provisioner (every `reconcile_interval`),
//! starts sidecar injection on machines that boot, follows jobs onto machines, tears down
//! machines that failed or are no longer needed, and asks the scaler for machines to create.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::PoolMachines;
use super::policy::reason_code;
use crate::config::ScalingConfig;
use crate::core::breaker::BreakerState;
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::scaler::{self, MachineView, PlanInput};
use crate::core::schedule::PolicyEntry;
use crate::core::{JobId, SidecarId};
use crate::dispatch::{PoolQueue, SlotGate};
use crate::inject::Injector;
use crate::jobs::Jobs;
use crate::sidecars::Sidecars;
use crate::ssh::Target;
use crate::store::{HostKey, HostKeySource, MachineRecord};

/// How often the loop runs without being woken.
const TICK: Duration = Duration::from_secs(1);
/// Shortest time between the starts of two passes over the machines.
const PASS_GAP: Duration = Duration::from_millis(100);
/// Stopping a sidecar before its machine is destroyed is a courtesy, bounded.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct PoolController {
    pub machines: Arc<PoolMachines>,
    pub(super) injector: Injector,
    pub(super) sidecars: Arc<Sidecars>,
    pub(super) jobs: Arc<Jobs>,
    pub(super) queue: Arc<PoolQueue>,
    pub(super) scaling: ScalingConfig,
    pub(super) policies: Vec<PolicyEntry>,
    /// The `[[pools.policy]]` entry in force at the last pass (`Some(None)`: the pool's own).
    pub(super) period: Mutex<Option<Option<usize>>>,
    reconcile_interval: Duration,
    ready_timeout: Duration,
    pub(super) silence_timeout: Duration,
    /// Machines with an injection in flight.
    injecting: Mutex<HashSet<String>>,
    /// Machines being torn down.
    tearing_down: Mutex<HashSet<String>>,
    /// Silent machines being probed over SSH.
    pub(super) probing: Mutex<HashSet<String>>,
    /// Where each executed plan is reported (metrics, the admin API's decisions).
    decisions: std::sync::OnceLock<Arc<crate::decisions::Decisions>>,
}

/// How the controller is set up.
#[derive(Debug)]
pub struct ControllerSettings {
    pub scaling: ScalingConfig,
    pub policies: Vec<PolicyEntry>,
    pub reconcile_interval: Duration,
    pub ready_timeout: Duration,
    pub silence_timeout: Duration,
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl PoolController {
    pub fn new(
        machines: Arc<PoolMachines>,
        injector: Injector,
        sidecars: Arc<Sidecars>,
        jobs: Arc<Jobs>,
        queue: Arc<PoolQueue>,
        settings: ControllerSettings,
    ) -> Arc<Self> {
        Arc::new(Self {
            machines,
            injector,
            sidecars,
            jobs,
            queue,
            scaling: settings.scaling,
            policies: settings.policies,
            period: Mutex::new(None),
            reconcile_interval: settings.reconcile_interval,
            ready_timeout: settings.ready_timeout,
            silence_timeout: settings.silence_timeout,
            injecting: Mutex::new(HashSet::new()),
            tearing_down: Mutex::new(HashSet::new()),
            probing: Mutex::new(HashSet::new()),
            decisions: std::sync::OnceLock::new(),
        })
    }

    /// Reports every executed plan to `decisions`. Set once.
    pub fn report_decisions_to(&self, decisions: Arc<crate::decisions::Decisions>) {
        let _ = self.decisions.set(decisions);
    }

    pub(super) fn pool(&self) -> &str {
        self.machines.pool()
    }

    pub fn delete_on_shutdown(&self) -> bool {
        self.scaling.delete_on_shutdown
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut jobs_changed = self.jobs.subscribe();
        let mut machines_changed = self.machines.subscribe();
        let mut last_reconcile: Option<Instant> = None;
        loop {
            if last_reconcile.is_none_or(|t| t.elapsed() >= self.reconcile_interval) {
                let started = Instant::now();
                let span = tracing::info_span!("reconcile", pool = %self.pool());
                match tracing::Instrument::instrument(self.machines.reconcile(), span).await {
                    Ok(reclaims) => reclaims.iter().for_each(|r| self.reclaim(r)),
                    Err(e) => {
                        tracing::error!(pool = %self.pool(), error = %e, "reconcile pass failed")
                    }
                }
                self.machines.record_timing(true, started.elapsed());
                last_reconcile = Some(Instant::now());
            }
            if stop.is_cancelled() {
                break;
            }
            let started = Instant::now();
            let span = tracing::info_span!("pass", pool = %self.pool());
            tracing::Instrument::instrument(self.clone().pass(), span).await;
            self.machines.record_timing(false, started.elapsed());
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(TICK) => {}
                _ = jobs_changed.changed() => {}
                _ = machines_changed.changed() => {}
            }
            // Under a stream of job changes, one pass per PASS_GAP is enough: a pass looks at
            // every machine, and a region has thousands.
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(started + PASS_GAP)) => {}
            }
        }
        tracing::debug!(pool = %self.pool(), "pool controller stopped");
    }

    /// A machine the provider takes back: its jobs first (unstarted ones to other machines,
    /// running ones failed), then the machine out of service, so that no job's outcome comes
    /// from a sidecar being killed with its machine.
    fn reclaim(&self, reclaim: &super::Reclaim) {
        if let Some(sidecar) = reclaim.machine.sidecar {
            let mut leaving = reclaim.machine.clone();
            leaving.reason = Some(format!(
                "reclaimed by the provider ({})",
                reclaim.notice.reason
            ));
            self.release_jobs(&leaving, sidecar);
        }
        self.machines.reclaimed(reclaim);
    }

    /// One pass over the pool's machines.
    async fn pass(self: Arc<Self>) {
        let with_sidecars = self.jobs.with_each_sidecar();
        let running = |m: &MachineRecord| {
            m.sidecar
                .and_then(|s| with_sidecars.get(&s).copied())
                .unwrap_or(0)
        };
        for m in self.machines.snapshot() {
            let out_of_service = matches!(
                m.state,
                MachineState::Failed | MachineState::Destroying | MachineState::Gone
            );
            if let Some(sidecar) = m.sidecar
                && out_of_service
                && running(&m) > 0
            {
                self.release_jobs(&m, sidecar);
            }
            let result = match m.state {
                MachineState::Booting => {
                    self.clone().start_injection(&m);
                    Ok(())
                }
                MachineState::Busy if running(&m) == 0 => self
                    .machines
                    .apply(&m.id, MachineEvent::JobsDone, "")
                    .map(|_| ()),
                MachineState::Ready | MachineState::Busy | MachineState::Draining => {
                    if let Some(silence) = self.silent(&m) {
                        self.clone().start_probe(&m, silence);
                    }
                    Ok(())
                }
                MachineState::Failed => {
                    self.clone().start_teardown(&m);
                    Ok(())
                }
                MachineState::Destroying | MachineState::Gone => {
                    self.revoke(&m).await;
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot update the machine");
            }
        }
        self.scale(&running).await;
    }

    /// The scaler's decision, executed.
    async fn scale(self: &Arc<Self>, running: &(dyn Fn(&MachineRecord) -> u32 + Sync)) {
        let now = self.machines.now();
        let live = self.machines.live();
        let views: Vec<MachineView> = live
            .iter()
            .map(|m| MachineView {
                id: m.id.clone(),
                state: m.state,
                running_jobs: running(m),
                use_count: m.use_count,
                idle_since: m.since,
                created_at: m.created_at,
            })
            .collect();
        let waiting =
            u32::try_from(self.jobs.waiting_in_pool(self.pool()).len()).unwrap_or(u32::MAX);
        let policy = self.policy_in_force(now);
        let paused = !matches!(self.machines.breaker(), BreakerState::Closed);
        let plan = scaler::plan(&PlanInput {
            machines: &views,
            waiting_jobs: waiting,
            policy: &policy,
            provisioner_paused: paused,
            now,
        });
        for r in &plan.drain {
            let why = format!("{}: {}", reason_code(r.reason), r.detail);
            if let Err(e) = self.machines.apply(&r.id, MachineEvent::Drain, &why) {
                tracing::warn!(pool = %self.pool(), machine.id = %r.id, error = %e, "cannot drain the machine");
            }
        }
        for r in &plan.destroy {
            if let Some(m) = self.machines.get(&r.id) {
                let why = format!("{}: {}", reason_code(r.reason), r.detail);
                if let Err(e) = self.machines.apply(&r.id, MachineEvent::Destroy, &why) {
                    tracing::warn!(pool = %self.pool(), machine.id = %r.id, error = %e, "cannot retire the machine");
                    continue;
                }
                self.clone().start_teardown(&m);
            }
        }
        let mut created = 0;
        if plan.create > 0 {
            tracing::info!(pool = %self.pool(), create = plan.create, reason = reason_code(plan.reason), summary = %plan.summary, "scaling up");
            match self.machines.create(plan.create).await {
                Ok(n) if n < plan.create => {
                    created = n;
                    tracing::debug!(pool = %self.pool(), asked = plan.create, created = n, "creation throttled or paused");
                }
                Ok(n) => created = n,
                Err(e) => {
                    tracing::error!(pool = %self.pool(), error = %e, "cannot create machines")
                }
            }
        }
        if let Some(decisions) = self.decisions.get() {
            decisions.record(self.pool(), &plan, created, now);
        }
    }

    /// Tears a machine down in the background, once.
    fn start_teardown(self: Arc<Self>, m: &MachineRecord) {
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
        if let Some(endpoint) = &m.endpoint
            && m.sidecar.is_some()
        {
            let target = Target {
                host: endpoint.host.clone(),
                port: endpoint.port,
                user: endpoint.user.clone(),
                host_key: m.host_key.as_ref().map(|h| h.key.clone()),
            };
            let stop = async {
                let conn = self
                    .injector
                    .connect(&target, Instant::now() + STOP_TIMEOUT)
                    .await?;
                let result = self.injector.stop(&conn).await;
                conn.close().await;
                result
            };
            if let Err(e) = tokio::time::timeout(STOP_TIMEOUT, stop)
                .await
                .unwrap_or(Ok(()))
            {
                tracing::debug!(pool = %self.pool(), machine.id = %m.id, error = %e, "could not stop the sidecar before destroying its machine");
            }
        }
        self.revoke(m).await;
        let reason = m.reason.clone().unwrap_or_default();
        if let Err(e) = self.machines.retire(&m.id, &reason).await {
            tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot destroy the machine");
        }
    }

    /// The machine's sidecar token stops working.
    async fn revoke(&self, m: &MachineRecord) {
        if let Some(sidecar) = m.sidecar {
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

    fn start_injection(self: Arc<Self>, m: &MachineRecord) {
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

    /// SSH in, check readiness, give the machine its own sidecar token, start the sidecar.
    async fn inject(&self, id: &str) -> Result<(), String> {
        let m = self.machines.get(id).ok_or("the machine vanished")?;
        let endpoint = m.endpoint.clone().ok_or("the provider gave no address")?;
        let target = Target {
            host: endpoint.host,
            port: endpoint.port,
            user: endpoint.user,
            host_key: m.host_key.as_ref().map(|h| h.key.clone()),
        };
        let deadline = Instant::now() + self.ready_timeout;
        let conn = self
            .injector
            .connect(&target, deadline)
            .await
            .map_err(|e| e.to_string())?;
        let step = async {
            if m.host_key.is_none() {
                let pinned = HostKey {
                    key: conn.host_key.clone(),
                    source: HostKeySource::FirstConnection,
                };
                tracing::info!(pool = %self.pool(), machine.id = %id, host_key = %pinned.key, "host key recorded on first connection; required from now on");
                self.machines
                    .update(id, |r| r.host_key = Some(pinned))
                    .map_err(|e| e.to_string())?;
            }
            self.injector
                .ready(&conn)
                .await
                .map_err(|e| e.to_string())?;
            self.machines
                .apply(id, MachineEvent::Reachable, "reachable over SSH")
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
            let pid = self
                .injector
                .start(&conn, id, &token)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(pool = %self.pool(), machine.id = %id, sidecar.id = %sidecar.id(), pid, "sidecar started; waiting for its first job request");
            Ok::<(), String>(())
        };
        let result = step.await;
        conn.close().await;
        result
    }
}

impl SlotGate for PoolController {
    fn may_take(&self, sidecar: SidecarId) -> bool {
        let Some(m) = self.machines.by_sidecar(sidecar) else {
            // A sidecar that registered itself: no machine of ours to protect.
            return true;
        };
        if !m.state.takes_jobs() {
            return false;
        }
        if self.scaling.max_use_count > 0 && m.use_count >= self.scaling.max_use_count {
            return false;
        }
        let running = self
            .jobs
            .with_each_sidecar()
            .get(&sidecar)
            .copied()
            .unwrap_or(0);
        running < self.scaling.capacity_per_machine
    }

    fn taken(&self, sidecar: SidecarId, job: JobId) {
        let Some(m) = self.machines.by_sidecar(sidecar) else {
            return;
        };
        let result = self
            .machines
            .update(&m.id, |r| r.use_count += 1)
            .and_then(|()| {
                self.machines
                    .apply(&m.id, MachineEvent::JobStarted, &format!("job {job}"))
            });
        if let Err(e) = result {
            tracing::warn!(pool = %self.pool(), machine.id = %m.id, error = %e, "cannot count the job on its machine");
        }
    }
}
