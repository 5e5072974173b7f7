//! Levels counted from the live state at each scrape: machines by state, job slots by state,
//! jobs by phase. Counting at scrape time keeps them exact (no gauge to keep in step with every
//! transition) and costs one pass over machines and jobs per scrape.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::core::machine::MachineState;
use crate::jobs::{Jobs, SidecarLoad};
use crate::machines::PoolMachines;
use crate::pools::Pool;
use crate::store::MachineRecord;

/// The `class` label of a machine of a pool without classes.
const NO_CLASS: &str = "default";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineLabels {
    pool: String,
    source: String,
    class: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotLabels {
    pool: String,
    /// `idle`, `reserved` (handed a job not yet started) or `busy`.
    state: String,
}

/// Each sidecar's jobs, counted once per scrape for both the machine and the slot levels.
type Load = HashMap<crate::core::SidecarId, SidecarLoad>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolOnly {
    pool: String,
}

fn class_label(m: &MachineRecord) -> &str {
    m.class.as_deref().unwrap_or(NO_CLASS)
}

/// Whether the sidecar `sidecar` holds a job (handed out or running).
fn has_jobs(load: &Load, sidecar: Option<crate::core::SidecarId>) -> bool {
    sidecar
        .and_then(|s| load.get(&s))
        .is_some_and(|l| l.assigned + l.running > 0)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    pool: String,
    phase: String,
}

/// What the levels are counted from.
#[derive(Debug)]
pub struct Levels {
    pools: Vec<Arc<Pool>>,
    machines: HashMap<String, Arc<PoolMachines>>,
    jobs: Arc<Jobs>,
    /// Every (pool, source, class) a machine was seen in: each keeps its series, at zero once
    /// its machines are gone, so that a dashboard sees it empty rather than missing.
    seen: Mutex<BTreeSet<(String, String, String)>>,
}

impl Levels {
    pub fn new(
        pools: Vec<Arc<Pool>>,
        machines: HashMap<String, Arc<PoolMachines>>,
        jobs: Arc<Jobs>,
    ) -> Self {
        Self {
            pools,
            machines,
            jobs,
            seen: Mutex::default(),
        }
    }

    /// The (source, class) series of `pool` to show: every one a machine was seen in, or the
    /// first source with no class before any machine was made.
    fn series(
        &self,
        pool: &str,
        machines: &PoolMachines,
        records: &[MachineRecord],
    ) -> Vec<(String, String)> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for m in records {
            seen.insert((
                pool.to_string(),
                m.source.clone(),
                class_label(m).to_string(),
            ));
        }
        let mut series: Vec<(String, String)> = seen
            .iter()
            .filter(|(p, _, _)| p == pool)
            .map(|(_, source, class)| (source.clone(), class.clone()))
            .collect();
        if series.is_empty()
            && let Some(first) = machines.source_names().into_iter().next()
        {
            series.push((first, NO_CLASS.to_string()));
        }
        series
    }

    /// Machines by state, except that a draining machine still running jobs counts as `busy`:
    /// with `max_use_count = 1` every machine drains from its first job on, and a utilisation
    /// panel must see it busy. That it retires is [`Levels::retiring`].
    fn machines(&self, load: &Load) -> Family<MachineLabels, Gauge> {
        let family = Family::<MachineLabels, Gauge>::default();
        for (pool, machines) in &self.machines {
            let records = machines.snapshot();
            let labels = |source: &str, class: &str, state: MachineState| MachineLabels {
                pool: pool.clone(),
                source: source.into(),
                class: class.into(),
                state: state.name().into(),
            };
            // Every live state, zeros included, so that a dashboard sees a pool go to zero.
            for (source, class) in self.series(pool, machines, &records) {
                for state in MachineState::ALL.into_iter().filter(|s| !s.is_gone()) {
                    let _ = family.get_or_create(&labels(&source, &class, state));
                }
            }
            for m in records.iter().filter(|m| !m.state.is_gone()) {
                let shown = if m.state == MachineState::Draining && has_jobs(load, m.sidecar) {
                    MachineState::Busy
                } else {
                    m.state
                };
                family
                    .get_or_create(&labels(&m.source, class_label(m), shown))
                    .inc();
            }
        }
        family
    }

    /// Machines being retired (draining: no new job, destroyed once idle), busy or not.
    fn retiring(&self) -> Family<PoolOnly, Gauge> {
        let family = Family::<PoolOnly, Gauge>::default();
        for (pool, machines) in &self.machines {
            let n = machines
                .snapshot()
                .iter()
                .filter(|m| m.state == MachineState::Draining)
                .count();
            family
                .get_or_create(&PoolOnly { pool: pool.clone() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        family
    }

    /// Slots of the machines that take jobs: busy (a job started), reserved (a job handed out
    /// and not yet started), idle (what is left of the machine's capacity and uses).
    fn slots(&self, load: &Load) -> Family<SlotLabels, Gauge> {
        let family = Family::<SlotLabels, Gauge>::default();

        for pool in &self.pools {
            let Some(machines) = self.machines.get(pool.name()) else {
                continue;
            };
            let policy = pool.policy();
            let scaling = &policy.scaling;
            let (mut idle, mut reserved, mut busy) = (0_i64, 0_i64, 0_i64);
            for m in machines.snapshot().iter() {
                let l = m
                    .sidecar
                    .and_then(|s| load.get(&s).copied())
                    .unwrap_or(SidecarLoad::default());
                // A draining machine's jobs still occupy their slots; it offers no free one.
                reserved += i64::from(l.assigned);
                busy += i64::from(l.running);
                if !m.state.takes_jobs() {
                    continue;
                }
                let mut free = scaling
                    .capacity_per_machine
                    .saturating_sub(l.assigned + l.running);
                if scaling.max_use_count > 0 {
                    free = free.min(scaling.max_use_count.saturating_sub(m.use_count));
                }
                idle += i64::from(free);
            }
            for (state, n) in [("idle", idle), ("reserved", reserved), ("busy", busy)] {
                family
                    .get_or_create(&SlotLabels {
                        pool: pool.name().into(),
                        state: state.into(),
                    })
                    .set(n);
            }
        }
        family
    }

    /// The `target_wait` in force of each demand-aware pool that makes machines (reloads
    /// included), so that an alert can hold the p95 wait its users see against it.
    fn target_waits(&self) -> Family<PoolOnly, Gauge<f64, AtomicU64>> {
        let family = Family::<PoolOnly, Gauge<f64, AtomicU64>>::default();
        for pool in &self.pools {
            if let Some(target) = pool.target_wait() {
                family
                    .get_or_create(&PoolOnly {
                        pool: pool.name().into(),
                    })
                    .set(target.as_secs_f64());
            }
        }
        family
    }

    fn jobs(&self) -> Family<JobLabels, Gauge> {
        let family = Family::<JobLabels, Gauge>::default();
        let by_phase = self.jobs.phases_by_pool();
        for pool in &self.pools {
            for phase in crate::core::job::JobPhase::NAMES {
                let n = by_phase
                    .get(pool.name())
                    .and_then(|p| p.get(phase))
                    .copied()
                    .unwrap_or(0);
                family
                    .get_or_create(&JobLabels {
                        pool: pool.name().into(),
                        phase: phase.into(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        family
    }
}

fn emit(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

impl Collector for Levels {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = self.jobs.load_by_sidecar();
        emit(
            &mut encoder,
            "autoscaler_machines",
            "Machines by pool, source, class and state (gone ones not counted)",
            &self.machines(&load),
        )?;
        emit(
            &mut encoder,
            "autoscaler_machines_retiring",
            "Machines being retired (draining: no new job, destroyed once idle), busy or not",
            &self.retiring(),
        )?;
        emit(
            &mut encoder,
            "autoscaler_job_slots",
            "Job slots of the machines taking jobs: idle, reserved (handed a job not yet started), busy",
            &self.slots(&load),
        )?;
        emit(
            &mut encoder,
            "autoscaler_target_wait_seconds",
            "The p95 job wait a demand-aware pool's planner aims at (its target_wait in force)",
            &self.target_waits(),
        )?;
        emit(
            &mut encoder,
            "autoscaler_jobs",
            "Jobs the autoscaler holds, by pool and phase (finished ones until they are forgotten)",
            &self.jobs(),
        )
    }
}
