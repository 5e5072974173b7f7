//! The control loop of a pool with machines: level-triggered, woken by a timer or by changes of
//! jobs and machines. Each pass reconciles with the provisioner (every `reconcile_interval`),
//! starts sidecar injection on machines that boot, follows jobs onto machines, tears down
//! machines that failed or are no longer needed, and asks the scaler for machines to create.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::PoolMachines;
use crate::config::PolicyCell;
use crate::core::SidecarId;
use crate::core::classes::Classes;
use crate::core::demand::ClassDemand;
use crate::core::machine::{MachineEvent, MachineState};
use crate::core::scaler::PASS_INTERVAL;
use crate::dispatch::PoolQueue;
use crate::jobs::Jobs;
use crate::launcher::SidecarLauncher;
use crate::sidecars::Sidecars;
use crate::store::MachineRecord;

/// How often the loop runs without being woken: the planner's pass interval.
const TICK: Duration = Duration::from_millis(PASS_INTERVAL);
/// Shortest time between the starts of two passes over the machines.
const PASS_GAP: Duration = Duration::from_millis(100);

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug)]
pub struct PoolController {
    pub machines: Arc<PoolMachines>,
    pub(super) launcher: Arc<dyn SidecarLauncher>,
    pub(super) sidecars: Arc<Sidecars>,
    pub(super) jobs: Arc<Jobs>,
    pub(super) queue: Arc<PoolQueue>,
    /// The pool's scaling policy in force, shared with its intake and replaced by reloads.
    pub(super) policy: Arc<PolicyCell>,
    /// The pool's machine classes (`None`: one kind of machine).
    pub(super) classes: Option<Classes>,
    /// The `[[pools.policy]]` entry in force at the last pass (`Some(None)`: the pool's own).
    pub(super) period: Mutex<Option<Option<usize>>>,
    reconcile_interval: Duration,
    pub(super) ready_timeout: Duration,
    pub(super) silence_timeout: Duration,
    /// When the provisioner was last asked what exists (service clock).
    last_reconcile: Mutex<Option<crate::core::Millis>>,
    /// The project of the last job each sidecar was given (for routing; a hint, not kept
    /// across restarts).
    pub(super) last_project: Mutex<HashMap<SidecarId, u64>>,
    /// Machines with an injection in flight.
    pub(super) injecting: Mutex<HashSet<String>>,
    /// Machines being torn down.
    pub(super) tearing_down: Mutex<HashSet<String>>,
    /// Silent machines being probed over SSH.
    pub(super) probing: Mutex<HashSet<String>>,
    /// Arrivals, slots in use and create-to-ready times of each machine class, for the
    /// demand-aware strategy.
    pub(super) demand: Mutex<ClassDemand>,
    /// The projects' pipeline shapes and pipelines in flight, for the pipeline forecast.
    pub(super) pipelines: Mutex<super::learning::PipelineLearning>,
    /// Where each executed plan is reported (metrics, the admin API's decisions).
    pub(super) decisions: std::sync::OnceLock<Arc<crate::decisions::Decisions>>,
    /// The pool asks for a warm pool its provisioner cannot keep, and that was logged.
    pub(super) warm_pool_refused: std::sync::atomic::AtomicBool,
    /// Asks GitLab for the stages to come of each pipeline first seen (with an API token).
    pub(super) lookahead: std::sync::OnceLock<Arc<crate::lookahead::LookAhead>>,
}

/// How the controller is set up.
#[derive(Debug)]
pub struct ControllerSettings {
    pub policy: Arc<PolicyCell>,
    pub classes: Option<Classes>,
    pub reconcile_interval: Duration,
    pub ready_timeout: Duration,
    pub silence_timeout: Duration,
}

impl PoolController {
    pub fn new(
        machines: Arc<PoolMachines>,
        launcher: Arc<dyn SidecarLauncher>,
        sidecars: Arc<Sidecars>,
        jobs: Arc<Jobs>,
        queue: Arc<PoolQueue>,
        settings: ControllerSettings,
    ) -> Arc<Self> {
        let pipelines =
            super::learning::PipelineLearning::load(machines.store().as_ref(), machines.pool());
        let controller = Arc::new(Self {
            machines,
            launcher,
            sidecars,
            jobs,
            queue,
            policy: settings.policy,
            classes: settings.classes,
            period: Mutex::new(None),
            reconcile_interval: settings.reconcile_interval,
            ready_timeout: settings.ready_timeout,
            silence_timeout: settings.silence_timeout,
            last_reconcile: Mutex::new(None),
            last_project: Mutex::new(HashMap::new()),
            injecting: Mutex::new(HashSet::new()),
            tearing_down: Mutex::new(HashSet::new()),
            probing: Mutex::new(HashSet::new()),
            demand: Mutex::new(ClassDemand::default()),
            pipelines: Mutex::new(pipelines),
            decisions: std::sync::OnceLock::new(),
            warm_pool_refused: std::sync::atomic::AtomicBool::new(false),
            lookahead: std::sync::OnceLock::new(),
        });
        // A machine's sidecar starts as soon as the provider says it runs; the pass that made
        // it may still be waiting for the provider's other creates.
        let weak = Arc::downgrade(&controller);
        controller.machines.on_booting(move |id| {
            let in_runtime = tokio::runtime::Handle::try_current().is_ok();
            if let Some(this) = weak.upgrade().filter(|_| in_runtime)
                && let Some(m) = this.machines.get(id)
            {
                this.start_injection(&m);
            }
        });
        controller
    }

    /// Reports every executed plan to `decisions`. Set once.
    pub fn report_decisions_to(&self, decisions: Arc<crate::decisions::Decisions>) {
        let _ = self.decisions.set(decisions);
    }

    /// Asks `lookahead` about each pipeline first seen. Set once.
    pub fn look_ahead_with(&self, lookahead: Arc<crate::lookahead::LookAhead>) {
        let _ = self.lookahead.set(lookahead);
    }

    /// The class `m` belongs to (`None`: the pool has no classes). A machine without one
    /// (adopted, or made before classes were configured) is of the default class.
    pub(super) fn class_of(&self, m: &MachineRecord) -> Option<String> {
        self.class_named(m.class.as_deref())
    }

    /// The class of a machine whose record names `recorded`.
    pub(super) fn class_named(&self, recorded: Option<&str>) -> Option<String> {
        let classes = self.classes.as_ref()?;
        Some(recorded.unwrap_or(&classes.default).to_string())
    }

    /// Jobs at once on machine `m`.
    pub(super) fn capacity_of(&self, m: &MachineRecord) -> u32 {
        self.class_of(m)
            .and_then(|name| self.classes.as_ref()?.get(&name))
            .map_or(self.policy.load().scaling.capacity_per_machine, |c| {
                c.capacity_per_machine
            })
    }

    pub(super) fn pool(&self) -> &str {
        self.machines.pool()
    }

    pub fn delete_on_shutdown(&self) -> bool {
        self.policy.load().scaling.delete_on_shutdown
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut jobs_changed = self.jobs.subscribe();
        let mut machines_changed = self.machines.subscribe();
        loop {
            self.reconcile_if_due().await;
            if stop.is_cancelled() {
                break;
            }
            let started = crate::clock::monotonic();
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
                () = tokio::time::sleep_until(started + PASS_GAP) => {}
            }
        }
        self.save_pipeline_shapes(true);
        tracing::debug!(pool = %self.pool(), "pool controller stopped");
    }

    /// Asks the provisioner what exists when `reconcile_interval` has passed since the last
    /// time (on the service's clock, so that tests move it).
    async fn reconcile_if_due(&self) {
        let now = self.machines.now();
        let due = self
            .last_reconcile
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none_or(|at| now.saturating_sub(at) >= ms(self.reconcile_interval));
        if !due {
            return;
        }
        let started = crate::clock::monotonic();
        let span = tracing::info_span!("reconcile", pool = %self.pool());
        match tracing::Instrument::instrument(self.machines.reconcile(), span).await {
            Ok(reclaims) => reclaims.iter().for_each(|r| self.reclaim(r)),
            Err(e) => {
                tracing::error!(pool = %self.pool(), error = %e, "reconcile pass failed")
            }
        }
        self.machines.record_timing(true, started.elapsed());
        *self
            .last_reconcile
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.machines.now());
    }

    /// One turn of the loop, for tests that drive the controller by hand: reconcile when due,
    /// then a pass.
    #[cfg(test)]
    pub(super) async fn step(self: &Arc<Self>) {
        self.reconcile_if_due().await;
        self.clone().pass().await;
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

    /// How many jobs each machine runs, read now. Read the machines first: a job handed out
    /// in between is then seen on a machine whose record does not count it yet, which is
    /// harmless, never the other way round, where a machine that counts the job (busy, used
    /// up) would look idle and be marked ready or retired under it.
    pub(super) fn jobs_on_machines(&self) -> impl Fn(&MachineRecord) -> u32 + Sync + use<> {
        let with_sidecars = self.jobs.with_each_sidecar();
        move |m: &MachineRecord| {
            m.sidecar
                .and_then(|s| with_sidecars.get(&s).copied())
                .unwrap_or(0)
        }
    }

    /// One pass over the pool's machines.
    async fn pass(self: Arc<Self>) {
        let machines = self.machines.snapshot();
        let running = self.jobs_on_machines();
        for m in machines {
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
        self.scale().await;
    }
}
