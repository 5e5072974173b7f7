//! `autoscaler simulate WORKLOAD --policy FILE`: a workload of jobs through the planner the
//! service uses, in virtual time, against a modelled cloud, reported as JSON: how long jobs
//! waited and what the machines cost. Deterministic: the workload's seed fixes the jobs, and
//! the n-th machine of a pool boots as long whatever the policy.
//!
//! The model and its assumptions are in `deploy/simulate/MODEL.md`.

mod engine;
mod fleet;
mod input;
mod policy;
mod report;
mod rng;
mod workload;

use std::path::{Path, PathBuf};

pub use report::{PoolReport, Report};

use crate::config::reader::{Problems, Section};

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {}", file.display(), problems.join(&format!("\n{}: ", file.display())))]
    Invalid {
        file: PathBuf,
        problems: Vec<String>,
    },
}

/// Runs `workload` under `policy`.
pub fn simulate(workload: &Path, policy: &Path) -> Result<Report, SimulateError> {
    let workload_input = input::Input::read(workload)?;
    let policy_input = input::Input::read(policy)?;
    let load = workload::read(&workload_input)?;
    let pools = policy::read(&policy_input)?;
    check_classes(&workload_input, &load, &pools, policy)?;
    let jobs = load.jobs();
    let until = load.start + load.length;
    let tallies = pools
        .iter()
        .map(|pool| {
            let own: Vec<workload::Job> = jobs
                .iter()
                .filter(|j| j.class == pool.name)
                .cloned()
                .collect();
            let seed = load.seed ^ hash(&pool.name);
            (
                pool.name.clone(),
                engine::run(pool, &own, load.start, until, seed),
            )
        })
        .collect();
    Ok(Report::new(name_of(workload), name_of(policy), tallies))
}

/// A job of a workload as the simulator draws it: when it reaches GitLab (after the workload's
/// start), how long it runs, and its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawnJob {
    pub after: std::time::Duration,
    pub runs_for: std::time::Duration,
    pub class: String,
}

/// The jobs of `workload`, in order of arrival: the very jobs [`simulate`] runs, so that the same
/// workload can be replayed against a real service and the two compared.
pub fn workload_jobs(workload: &Path) -> Result<Vec<DrawnJob>, SimulateError> {
    let load = workload::read(&input::Input::read(workload)?)?;
    let ms = std::time::Duration::from_millis;
    Ok(load
        .jobs()
        .into_iter()
        .map(|j| DrawnJob {
            after: ms(j.at - load.start),
            runs_for: ms(j.runs_for),
            class: j.class,
        })
        .collect())
}

/// Every class the workload names has a pool in the policy.
fn check_classes(
    input: &input::Input,
    load: &workload::Workload,
    pools: &[policy::SimPool],
    policy: &Path,
) -> Result<(), SimulateError> {
    let problems = Problems::default();
    let root = Section::root(&input.dict, &problems);
    for (i, a) in load.arrivals.iter().enumerate() {
        if !pools.iter().any(|p| p.name == a.class) {
            root.problem(
                &format!("arrivals[{i}].class"),
                format!(
                    "{:?} has no [[pools]] entry of that name in {}",
                    a.class,
                    policy.display()
                ),
            );
        }
    }
    input.check(problems)
}

fn name_of(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// FNV-1a: a stable seed per pool name.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests;
