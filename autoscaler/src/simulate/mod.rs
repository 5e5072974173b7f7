//! `autoscaler simulate WORKLOAD --policy FILE`: a workload of jobs through the planner the
//! service uses, in virtual time, against a modelled cloud, reported as JSON: how long jobs
//! waited and what the machines cost. Deterministic: the workload's seed fixes the jobs (and
//! the pipelines, whose later jobs the run releases as earlier ones end), and the n-th machine
//! of a pool boots as long whatever the policy. The workload may instead be a replay of
//! recorded jobs (`*.tsv`, [`replay`]).
//!
//! The model and its assumptions are in `deploy/simulate/MODEL.md`.

mod draws;
mod engine;
mod fleet;
mod input;
mod load;
mod oracle;
mod pipeline;
mod policy;
mod release;
pub mod replay;
mod report;
mod rng;
mod sweep;
mod workload;

use std::path::{Path, PathBuf};

pub use oracle::{OracleCost, OracleReport};
pub use report::{PoolReport, Report};
pub use sweep::{SweepReport, SweepRun, sweep_target_wait};

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

/// Runs `workload` (a TOML workload, or a `*.tsv` replay) under `policy`.
pub fn simulate(workload: &Path, policy: &Path) -> Result<Report, SimulateError> {
    let (load, pools) = read_inputs(workload, policy)?;
    Ok(run(&load, &pools, name_of(workload), name_of(policy)))
}

/// The workload's jobs and the policy's pools, each class of the one served by a pool of the
/// other.
fn read_inputs(
    workload: &Path,
    policy: &Path,
) -> Result<(load::Load, Vec<policy::SimPool>), SimulateError> {
    let load = load::Load::read(workload)?;
    let pools = policy::read(&input::Input::read(policy)?)?;
    load.check_classes(workload, &pools, policy)?;
    Ok((load, pools))
}

/// Each of `pools` through its class's share of `load`, reported under the two names.
fn run(load: &load::Load, pools: &[policy::SimPool], workload: String, policy: String) -> Report {
    let until = load.start + load.length;
    let tallies = pools
        .iter()
        .map(|pool| {
            let jobs: Vec<workload::Job> = load
                .jobs
                .iter()
                .filter(|j| j.class == pool.name)
                .cloned()
                .collect();
            let pipelines: Vec<pipeline::Pipeline> = load
                .pipelines
                .iter()
                .filter(|p| p.class == pool.name)
                .cloned()
                .collect();
            let own = engine::PoolLoad {
                jobs: &jobs,
                pipelines: &pipelines,
            };
            let seed = load.seed ^ hash(&pool.name);
            (
                pool.name.clone(),
                engine::run(pool, &own, load.start, until, seed),
            )
        })
        .collect();
    Report::new(workload, policy, tallies)
}

/// The clairvoyant lower bound on `workload` ([`oracle`]): no job waits, and the machine time
/// paid beyond the jobs is the least possible when every boot takes `boot`.
pub fn oracle(workload: &Path, boot: std::time::Duration) -> Result<OracleReport, SimulateError> {
    let load = load::Load::read(workload)?;
    let boot = u64::try_from(boot.as_millis()).unwrap_or(u64::MAX);
    Ok(oracle::run(&load, name_of(workload), boot))
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
/// workload can be replayed against a real service and the two compared. A workload with
/// pipelines is refused: when their later jobs reach GitLab depends on the run.
pub fn workload_jobs(workload: &Path) -> Result<Vec<DrawnJob>, SimulateError> {
    let load = load::Load::read(workload)?;
    if !load.pipelines.is_empty() {
        return Err(SimulateError::Invalid {
            file: workload.to_path_buf(),
            problems: vec![
                "pipelines: their jobs' times depend on the run, so they cannot be listed ahead"
                    .into(),
            ],
        });
    }
    let ms = std::time::Duration::from_millis;
    Ok(load
        .jobs
        .into_iter()
        .map(|j| DrawnJob {
            after: ms(j.at - load.start),
            runs_for: ms(j.runs_for),
            class: j.class,
        })
        .collect())
}

/// A pipeline of a workload as the simulator draws it: when it is created (after the
/// workload's start), its project, and its stages in order, each job with its run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawnPipeline {
    pub after: std::time::Duration,
    pub project: String,
    /// (stage, its jobs as (name, run time)), in order.
    pub stages: Vec<(String, Vec<(String, std::time::Duration)>)>,
}

/// The pipelines of `workload`, in order of creation: the very pipelines [`simulate`] runs,
/// so that a real GitLab (or the fake) can run them by stages and the two be compared. Only
/// stage-ordered pipelines: a job with `needs` is refused, as is a workload with arrivals.
pub fn workload_pipelines(workload: &Path) -> Result<Vec<DrawnPipeline>, SimulateError> {
    let load = load::Load::read(workload)?;
    let refuse = |problem: &str| SimulateError::Invalid {
        file: workload.to_path_buf(),
        problems: vec![problem.to_string()],
    };
    if !load.jobs.is_empty() {
        return Err(refuse("arrivals: only pipelines are listed here"));
    }
    let ms = std::time::Duration::from_millis;
    let mut drawn = Vec::with_capacity(load.pipelines.len());
    for p in &load.pipelines {
        let mut stages: Vec<(String, Vec<(String, std::time::Duration)>)> = Vec::new();
        for (i, job) in p.jobs.iter().enumerate() {
            if stages.last().is_none_or(|(name, _)| *name != job.stage) {
                stages.push((job.stage.clone(), Vec::new()));
            }
            let earlier = i - stages.last().map_or(0, |(_, jobs)| jobs.len());
            if job.after != (0..earlier).collect::<Vec<_>>() {
                return Err(refuse(&format!("pipelines: job {:?} has needs", job.name)));
            }
            if let Some((_, jobs)) = stages.last_mut() {
                jobs.push((job.name.clone(), ms(job.runs_for)));
            }
        }
        drawn.push(DrawnPipeline {
            after: ms(p.created - load.start),
            project: p.project.clone(),
            stages,
        });
    }
    drawn.sort_by_key(|p| p.after);
    Ok(drawn)
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
mod pipeline_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod warm_tests;
