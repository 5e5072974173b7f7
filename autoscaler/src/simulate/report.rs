//! What a simulation reports: job waits, machine time (all, and idle), machines made, cost.

use serde::Serialize;

use super::fleet::Fleet;
use crate::core::Millis;

/// Counted during a pool's run.
#[derive(Debug, Default)]
pub struct Tally {
    /// Seconds from reaching GitLab to starting, per job (a job that hit `acquire_timeout`
    /// counts with its wait until then).
    waits: Vec<f64>,
    timeouts: u32,
    pools: Option<PoolReport>,
    /// Every start, for the tests that check when pipeline jobs became pending.
    #[cfg(test)]
    pub starts: Vec<Start>,
}

/// A job's start on a machine: which job, when it reached GitLab, when it started.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub key: Option<super::release::JobKey>,
    pub arrived: Millis,
    pub at: Millis,
}

impl Tally {
    pub fn started(&mut self, wait: Millis) {
        self.waits.push(wait as f64 / 1000.0);
    }

    pub fn timed_out(&mut self, wait: Millis) {
        self.waits.push(wait as f64 / 1000.0);
        self.timeouts += 1;
    }

    pub fn finish(&mut self, fleet: &Fleet, span: Millis) {
        self.pools = Some(PoolReport::new(self, fleet, span));
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Waits {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Waits {
    fn of(waits: &[f64]) -> Self {
        let mut sorted = waits.to_vec();
        sorted.sort_by(f64::total_cmp);
        // Nearest rank, to the tenth of a second.
        let at = |q: f64| {
            let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
            sorted
                .get(rank - 1)
                .map_or(0.0, |w| (w * 10.0).round() / 10.0)
        };
        Self {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MachineMinutes {
    pub total: f64,
    /// Ready (or draining) and running no job. Booting time is in `total` only.
    pub idle: f64,
    /// From a create (or a warm pool's start) to ready or failure; in `total`, not in `idle`.
    pub booting: f64,
    /// Warm pool: stopped, billed at the stopped (disk) price; not in `total`.
    pub stopped: f64,
}

/// One pool's (one machine class's) results, or all pools' together.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PoolReport {
    pub jobs: usize,
    pub wait_seconds: Waits,
    pub machine_minutes: MachineMinutes,
    pub machines_created: u32,
    pub machines_failed: u32,
    /// Made ready and destroyed (or left at the end) without running a job.
    pub machines_never_used: u32,
    pub peak_machines: u32,
    pub acquire_timeouts: u32,
    /// In the price's currency, when the policy gives prices.
    pub cost: Option<f64>,
    /// Simulated time, in hours.
    pub hours: f64,
    #[serde(skip)]
    waits: Vec<f64>,
}

fn minutes(ms: u128) -> f64 {
    (ms as f64 / 60_000.0 * 10.0).round() / 10.0
}

impl PoolReport {
    fn new(tally: &Tally, fleet: &Fleet, span: Millis) -> Self {
        Self {
            jobs: tally.waits.len(),
            wait_seconds: Waits::of(&tally.waits),
            machine_minutes: MachineMinutes {
                total: minutes(fleet.alive_ms),
                idle: minutes(fleet.idle_ms),
                booting: minutes(fleet.booting_ms),
                stopped: minutes(fleet.stopped_ms),
            },
            machines_created: fleet.created,
            machines_failed: fleet.failed,
            machines_never_used: fleet.never_used,
            peak_machines: fleet.peak,
            acquire_timeouts: tally.timeouts,
            cost: fleet.cost().map(|c| (c * 100.0).round() / 100.0),
            hours: (span as f64 / 360_000.0).round() / 10.0,
            waits: tally.waits.clone(),
        }
    }
}

/// The whole simulation: all pools together, and each.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    pub policy: String,
    #[serde(flatten)]
    pub total: PoolReport,
    pub pools: std::collections::BTreeMap<String, PoolReport>,
}

impl Report {
    pub fn new(workload: String, policy: String, tallies: Vec<(String, Tally)>) -> Self {
        let pools: std::collections::BTreeMap<String, PoolReport> = tallies
            .into_iter()
            .filter_map(|(name, t)| t.pools.map(|p| (name, p)))
            .collect();
        let all = pools.values();
        let waits: Vec<f64> = all.clone().flat_map(|p| p.waits.iter().copied()).collect();
        let sum = |f: &dyn Fn(&PoolReport) -> f64| all.clone().map(f).sum::<f64>();
        let count = |f: &dyn Fn(&PoolReport) -> u32| all.clone().map(f).sum::<u32>();
        let costs: Option<Vec<f64>> = all.clone().map(|p| p.cost).collect();
        let total = PoolReport {
            jobs: waits.len(),
            wait_seconds: Waits::of(&waits),
            machine_minutes: MachineMinutes {
                total: (sum(&|p| p.machine_minutes.total) * 10.0).round() / 10.0,
                idle: (sum(&|p| p.machine_minutes.idle) * 10.0).round() / 10.0,
                booting: (sum(&|p| p.machine_minutes.booting) * 10.0).round() / 10.0,
                stopped: (sum(&|p| p.machine_minutes.stopped) * 10.0).round() / 10.0,
            },
            machines_created: count(&|p| p.machines_created),
            machines_failed: count(&|p| p.machines_failed),
            machines_never_used: count(&|p| p.machines_never_used),
            // Pools peak at different times; their sum bounds the peak from above.
            peak_machines: count(&|p| p.peak_machines),
            acquire_timeouts: count(&|p| p.acquire_timeouts),
            cost: costs.map(|c| (c.iter().sum::<f64>() * 100.0).round() / 100.0),
            hours: all.clone().map(|p| p.hours).fold(0.0, f64::max),
            waits,
        };
        Self {
            workload,
            policy,
            total,
            pools,
        }
    }
}
