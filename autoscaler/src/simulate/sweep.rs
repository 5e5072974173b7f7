//! `autoscaler simulate WORKLOAD --policy FILE --target-waits 10s,30s,60s`: the same jobs under
//! the same policy once per `target_wait`, every demand-aware pool set to it, and which of
//! those runs trade waiting against machine time best. On an operator's own replay, that is
//! the frontier to pick a target from (the book's Frontiers page draws it for the shipped
//! workloads, beside taskscaler's).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::policy::SimPool;
use super::{Report, SimulateError, load::Load};
use crate::core::scaler::Strategy;

/// One run per target, and which are on the frontier.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub workload: String,
    pub policy: String,
    /// What a run's price is judged by: `cost` when the policy prices every pool (a warm
    /// pool's stopped machines then count at their disk's price), else `overhead_minutes`.
    pub frontier_by: &'static str,
    /// In the order the targets were given.
    pub runs: Vec<SweepRun>,
}

/// A run under one `target_wait`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRun {
    pub target_wait_seconds: f64,
    /// The p95 wait of every job, all pools together.
    pub p95_wait_seconds: f64,
    /// Idle plus booting machine-minutes: machine time paid for no job.
    pub overhead_minutes: f64,
    pub machines_never_used: u32,
    pub cost: Option<f64>,
    /// No other run waits as little for as little (at least as good on both, better on one).
    pub on_frontier: bool,
    /// The run's whole report, as `simulate` prints it without `--target-waits`.
    pub report: Report,
}

/// Runs `workload` under `policy` once per target of `targets` (as many at once as the machine
/// has cores: the runs share nothing), each demand-aware pool's `target_wait` set to it. A
/// policy without a demand-aware pool is refused: the targets would change nothing.
pub fn sweep_target_wait(
    workload: &Path,
    policy: &Path,
    targets: &[Duration],
) -> Result<SweepReport, SimulateError> {
    let (load, pools) = super::read_inputs(workload, policy)?;
    if !pools.iter().any(|p| p.scaling.strategy == Strategy::Demand) {
        return Err(SimulateError::Invalid {
            file: policy.to_path_buf(),
            problems: vec![
                "target_wait: no pool is demand-aware (each has strategy = \"idle\"), so \
                 --target-waits would change nothing"
                    .into(),
            ],
        });
    }
    let (workload, policy) = (super::name_of(workload), super::name_of(policy));
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut reports: Vec<Report> = Vec::with_capacity(targets.len());
    for batch in targets.chunks(cores) {
        std::thread::scope(|scope| {
            let runs: Vec<_> = batch
                .iter()
                .map(|&target| {
                    let (load, pools) = (&load, &pools);
                    let names = (workload.as_str(), policy.as_str());
                    scope.spawn(move || run_at(load, pools, target, names))
                })
                .collect();
            reports.extend(
                runs.into_iter()
                    .map(|run| run.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
            );
        });
    }
    let priced = reports.iter().all(|r| r.total.cost.is_some());
    let price = |r: &Report| {
        if priced {
            r.total.cost.unwrap_or(0.0)
        } else {
            overhead(r)
        }
    };
    let points: Vec<(f64, f64)> = reports
        .iter()
        .map(|r| (price(r), r.total.wait_seconds.p95))
        .collect();
    let runs = targets
        .iter()
        .zip(reports)
        .enumerate()
        .map(|(i, (target, report))| SweepRun {
            target_wait_seconds: target.as_secs_f64(),
            p95_wait_seconds: report.total.wait_seconds.p95,
            overhead_minutes: overhead(&report),
            machines_never_used: report.total.machines_never_used,
            cost: report.total.cost,
            on_frontier: !dominated(points[i], &points),
            report,
        })
        .collect();
    Ok(SweepReport {
        workload,
        policy,
        frontier_by: if priced { "cost" } else { "overhead_minutes" },
        runs,
    })
}

/// `pools` through `load` with every demand-aware pool's target at `target`.
fn run_at(
    load: &Load,
    pools: &[SimPool],
    target: Duration,
    (workload, policy): (&str, &str),
) -> Report {
    let pools: Vec<SimPool> = pools
        .iter()
        .cloned()
        .map(|mut pool| {
            if pool.scaling.strategy == Strategy::Demand {
                pool.scaling.target_wait = target;
            }
            pool
        })
        .collect();
    super::run(load, &pools, workload.to_string(), policy.to_string())
}

/// Idle plus booting machine-minutes, to the tenth.
fn overhead(report: &Report) -> f64 {
    let m = &report.total.machine_minutes;
    ((m.idle + m.booting) * 10.0).round() / 10.0
}

/// Whether another of `points` (price, p95) is at least as good on both and better on one.
fn dominated((price, p95): (f64, f64), points: &[(f64, f64)]) -> bool {
    points
        .iter()
        .any(|&(p, w)| p <= price && w <= p95 && (p < price || w < p95))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_beaten_on_both_figures_is_off_the_frontier() {
        let points = [(10.0, 30.0), (20.0, 10.0), (25.0, 10.0), (30.0, 5.0)];
        let on: Vec<bool> = points.iter().map(|&p| !dominated(p, &points)).collect();
        assert_eq!(on, [true, true, false, true]);
        // The same point twice: neither beats the other.
        assert!(!dominated((1.0, 1.0), &[(1.0, 1.0), (1.0, 1.0)]));
    }
}
