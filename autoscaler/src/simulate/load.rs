//! A workload as the engine takes it, from either kind of file: a TOML workload (jobs drawn
//! from `[[arrivals]]` and `[[pipelines]]`) or a replay (`*.tsv`, recorded jobs).

use std::path::Path;

use super::input::Input;
use super::pipeline::Pipeline;
use super::policy::SimPool;
use super::workload::Job;
use super::{SimulateError, replay, workload};
use crate::config::reader::{Problems, Section};
use crate::core::Millis;

/// A replay's pools are seeded with this (a replay draws nothing else).
const REPLAY_SEED: u64 = 1;

#[derive(Debug)]
pub struct Load {
    pub start: Millis,
    pub length: Millis,
    pub seed: u64,
    /// Jobs with a fixed time, in order of it.
    pub jobs: Vec<Job>,
    /// Pipelines whose jobs the run releases, in order of creation.
    pub pipelines: Vec<Pipeline>,
    source: Source,
}

#[derive(Debug)]
enum Source {
    Toml(Input, workload::Workload),
    /// The line and class of each recorded job.
    Replay(Vec<(usize, String)>),
}

pub fn is_replay(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "tsv")
}

impl Load {
    pub fn read(path: &Path) -> Result<Self, SimulateError> {
        if is_replay(path) {
            let r = replay::read(path)?;
            let lines = r.jobs.iter().map(|(n, j)| (*n, j.class.clone())).collect();
            return Ok(Self {
                start: r.start,
                length: r.end - r.start,
                seed: REPLAY_SEED,
                jobs: Vec::new(),
                pipelines: replay::pipelines(&r.jobs),
                source: Source::Replay(lines),
            });
        }
        let input = Input::read(path)?;
        let w = workload::read(&input)?;
        Ok(Self {
            start: w.start,
            length: w.length,
            seed: w.seed,
            jobs: w.jobs(),
            pipelines: w.pipelines(),
            source: Source::Toml(input, w),
        })
    }

    /// Every class the workload names has a pool in the policy.
    pub fn check_classes(
        &self,
        path: &Path,
        pools: &[SimPool],
        policy: &Path,
    ) -> Result<(), SimulateError> {
        let unknown = |class: &str| {
            (!pools.iter().any(|p| p.name == class)).then(|| {
                format!(
                    "{class:?} has no [[pools]] entry of that name in {}",
                    policy.display()
                )
            })
        };
        match &self.source {
            Source::Toml(input, w) => {
                let problems = Problems::default();
                let root = Section::root(&input.dict, &problems);
                let classes = w.arrivals.iter().map(|a| ("arrivals", &a.class));
                let classes = classes.enumerate().chain(
                    w.projects
                        .iter()
                        .map(|p| ("pipelines", &p.class))
                        .enumerate(),
                );
                for (i, (table, class)) in classes {
                    if let Some(problem) = unknown(class) {
                        root.problem(&format!("{table}[{i}].class"), problem);
                    }
                }
                input.check(problems)
            }
            Source::Replay(lines) => {
                let mut problems: Vec<String> = Vec::new();
                for (line, class) in lines {
                    if let Some(problem) = unknown(class)
                        && !problems.iter().any(|p| p.ends_with(&problem))
                    {
                        problems.push(format!("line {line}: class: {problem}"));
                    }
                }
                if problems.is_empty() {
                    return Ok(());
                }
                Err(SimulateError::Invalid {
                    file: path.to_path_buf(),
                    problems,
                })
            }
        }
    }
}
