//! `autoscaler simulate WORKLOAD --oracle`: the clairvoyant lower bound a policy is measured
//! against. Knowing every job's pending time ahead, the oracle has a machine ready exactly when
//! each job is pending (one job a machine, every boot `boot` long), so no job waits; what it
//! cannot avoid paying is the boots and the idle gaps between a machine's jobs.
//!
//! A free machine is kept for the next pending job when the gap until it is no longer than a
//! boot (idling is then cheaper than making a new one), and destroyed the moment it is freed
//! otherwise. Each job takes the machine freed most recently: the gap's cost, `min(gap, boot)`,
//! is concave, so that nested matching has the least total of all matchings: no schedule that
//! starts every job when it is pending pays less (a policy can, by making jobs wait).
//! Pipelines are seen at the pending times of a run in which no job waits; a policy whose jobs
//! wait shifts later stages, so for pipelines this is the bound of that zero-wait run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::Serialize;

use super::load::Load;
use crate::core::Millis;

/// The oracle's cost for all classes together, and for each.
#[derive(Debug, Clone, Serialize)]
pub struct OracleReport {
    pub workload: String,
    pub boot_seconds: f64,
    #[serde(flatten)]
    pub total: OracleCost,
    pub pools: BTreeMap<String, OracleCost>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OracleCost {
    pub jobs: usize,
    pub machines_made: u32,
    pub machine_minutes: OracleMinutes,
    /// Booting plus idle: the machine time no job used.
    pub overhead_minutes: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OracleMinutes {
    pub total: f64,
    pub busy: f64,
    pub booting: f64,
    pub idle: f64,
}

/// The oracle on `load`, a class at a time (machines do not move between pools).
pub fn run(load: &Load, workload: String, boot: Millis) -> OracleReport {
    let mut by_class: BTreeMap<String, Vec<(Millis, Millis)>> = BTreeMap::new();
    for j in &load.jobs {
        by_class
            .entry(j.class.clone())
            .or_default()
            .push((j.at, j.runs_for));
    }
    for p in &load.pipelines {
        let ready = p.zero_wait_ready();
        let jobs = by_class.entry(p.class.clone()).or_default();
        jobs.extend(ready.into_iter().zip(p.jobs.iter().map(|j| j.runs_for)));
    }
    let pools: BTreeMap<String, OracleCost> = by_class
        .into_iter()
        .map(|(class, mut jobs)| {
            jobs.sort_unstable();
            (class, cost(&jobs, boot).report())
        })
        .collect();
    let mut sum = Tally::default();
    for p in pools.values() {
        sum.add(p);
    }
    OracleReport {
        workload,
        boot_seconds: boot as f64 / 1000.0,
        total: sum.report(),
        pools,
    }
}

/// Milliseconds, summed before rounding.
#[derive(Debug, Default)]
struct Tally {
    jobs: usize,
    made: u32,
    busy: u128,
    booting: u128,
    idle: u128,
}

impl Tally {
    fn report(&self) -> OracleCost {
        let minutes = |ms: u128| (ms as f64 / 6_000.0).round() / 10.0;
        OracleCost {
            jobs: self.jobs,
            machines_made: self.made,
            machine_minutes: OracleMinutes {
                total: minutes(self.busy + self.booting + self.idle),
                busy: minutes(self.busy),
                booting: minutes(self.booting),
                idle: minutes(self.idle),
            },
            overhead_minutes: minutes(self.booting + self.idle),
        }
    }

    /// Adds a pool's rounded figures (the total is reported to the same tenth of a minute).
    fn add(&mut self, p: &OracleCost) {
        let ms = |minutes: f64| (minutes * 60_000.0).round() as u128;
        self.jobs += p.jobs;
        self.made += p.machines_made;
        self.busy += ms(p.machine_minutes.busy);
        self.booting += ms(p.machine_minutes.booting);
        self.idle += ms(p.machine_minutes.idle);
    }
}

/// `jobs`: (pending at, runs for), sorted.
fn cost(jobs: &[(Millis, Millis)], boot: Millis) -> Tally {
    let mut tally = Tally {
        jobs: jobs.len(),
        ..Tally::default()
    };
    let mut running: BinaryHeap<Reverse<Millis>> = BinaryHeap::new();
    // When each kept machine was freed, oldest first.
    let mut free: Vec<Millis> = Vec::new();
    for &(ready, runs_for) in jobs {
        while let Some(&Reverse(end)) = running.peek()
            && end <= ready
        {
            running.pop();
            free.push(end);
        }
        // Freed longer than a boot ago: cheaper to have destroyed it when it was freed.
        free.retain(|&freed| ready - freed <= boot);
        match free.pop() {
            Some(freed) => tally.idle += u128::from(ready - freed),
            None => {
                tally.made += 1;
                tally.booting += u128::from(boot);
            }
        }
        tally.busy += u128::from(runs_for);
        running.push(Reverse(ready + runs_for));
    }
    tally
}
