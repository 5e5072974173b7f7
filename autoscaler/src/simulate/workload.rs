//! A workload file: when jobs come, how many at once, how long they run, and which class of
//! machine they ask for. Jobs are drawn from it with a seeded generator, so a workload is the
//! same list of jobs every time and for every policy.
//!
//! ```toml
//! start = "2026-11-23T00:00:00Z"  # wall time matters for the policy's cron periods
//! length = "24h"
//! seed = 1
//! [[arrivals]]
//! from = "7h"                     # offsets from start
//! to = "10h"
//! jobs_per_hour = 60              # Poisson arrivals at this rate, or
//! # jobs = 500                    # exactly this many, spread at random over the span
//! batch = 3                       # jobs per arrival (a pipeline stage fanning out)
//! duration = ["2m", "12m"]        # run time, uniform in this range
//! class = "default"               # the policy's pool that serves them
//! ```
//!
//! and `[[pipelines]]`: projects whose jobs come as pipelines ([`super::pipeline`]).

use chrono::DateTime;

use super::draws::{self, HowMany, draw_times, ms, read_how_many, read_range};
use super::input::Input;
use super::pipeline::{self, Pipeline, Project};
use super::rng::Rng;
use crate::config::reader::{Problems, Section};
use crate::config::values;
use crate::core::Millis;

#[derive(Debug, Clone)]
pub struct Workload {
    pub start: Millis,
    pub length: Millis,
    pub seed: u64,
    pub arrivals: Vec<Arrivals>,
    pub projects: Vec<Project>,
}

/// One `[[arrivals]]` entry.
#[derive(Debug, Clone)]
pub struct Arrivals {
    pub from: Millis,
    pub to: Millis,
    pub how_many: HowMany,
    pub batch: u32,
    pub duration: (Millis, Millis),
    pub class: String,
}

/// A job of the workload: when it reaches GitLab, how long it runs, its class, and where it
/// comes from when it is known (a replayed job; a drawn arrival has no label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub at: Millis,
    pub runs_for: Millis,
    pub class: String,
    pub label: Option<Label>,
}

/// What GitLab knows of a job besides its timing: the pipeline forecast learns from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub project: String,
    pub pipeline: u64,
    pub stage: String,
    pub name: String,
    /// It ended as failed or canceled (a replay's `status`): the pipeline forecast is told,
    /// as the service is by the job's final state.
    pub failed: bool,
}

pub fn read(input: &Input) -> Result<Workload, super::SimulateError> {
    let problems = Problems::default();
    let root = Section::root(&input.dict, &problems);
    let _description: Option<String> = root.optional("description");
    let start = root.required::<String>("start").and_then(|s| {
        DateTime::parse_from_rfc3339(&s)
            .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
            .map_err(|e| root.problem("start", format!("{s:?} is not an RFC 3339 time ({e})")))
            .ok()
    });
    let length = root.parsed("length", values::duration).map(ms);
    if length.is_none() && !root.has("length") {
        root.problem("length", "is required");
    }
    let seed: u64 = root.or("seed", 1);
    let arrivals: Vec<Option<Arrivals>> = root
        .tables("arrivals")
        .into_iter()
        .map(read_arrivals)
        .collect();
    let projects: Vec<Option<Project>> = root
        .tables("pipelines")
        .into_iter()
        .map(pipeline::read_project)
        .collect();
    if arrivals.is_empty() && projects.is_empty() {
        root.problem(
            "arrivals",
            "needs at least one [[arrivals]] or [[pipelines]] entry",
        );
    }
    root.finish();
    input.check(problems)?;
    // Every problem was reported above; what is left is complete.
    Ok(Workload {
        start: start.unwrap_or(0),
        length: length.unwrap_or(0),
        seed,
        arrivals: arrivals.into_iter().flatten().collect(),
        projects: projects.into_iter().flatten().collect(),
    })
}

fn read_arrivals(s: Section<'_>) -> Option<Arrivals> {
    let from = s.parsed("from", values::duration).map(ms).unwrap_or(0);
    let to = s.parsed("to", values::duration).map(ms);
    if to.is_none() && !s.has("to") {
        s.problem("to", "is required");
    }
    if to.is_some_and(|to| to <= from) {
        s.problem("to", "must be after from");
    }
    let how_many = read_how_many(&s, "jobs", "jobs_per_hour");
    let batch: u32 = s.or("batch", 1);
    if !(1..=1000).contains(&batch) {
        s.problem("batch", "must be between 1 and 1000");
    }
    let duration = read_range(&s, "duration");
    let class: String = s.or("class", "default".to_string());
    s.finish();
    Some(Arrivals {
        from,
        to: to?,
        how_many: how_many?,
        batch,
        duration: duration?,
        class,
    })
}

impl Workload {
    /// Every job of `[[arrivals]]`, in order of arrival. The same for a seed whatever the
    /// policy.
    pub fn jobs(&self) -> Vec<Job> {
        let mut rng = Rng::new(self.seed);
        let mut jobs = Vec::new();
        for a in &self.arrivals {
            let times = draw_times(&mut rng, (a.to - a.from) as f64, a.how_many, a.batch);
            let mut left = match a.how_many {
                HowMany::Exactly(n) => n,
                HowMany::PerHour(_) => u32::MAX,
            };
            for t in times {
                for _ in 0..a.batch.min(left) {
                    left -= 1;
                    jobs.push(Job {
                        at: self.start + a.from + t as Millis,
                        runs_for: draws::uniform(&mut rng, a.duration),
                        class: a.class.clone(),
                        label: None,
                    });
                }
            }
        }
        jobs.sort_by_key(|j| j.at);
        jobs
    }

    /// Every pipeline of `[[pipelines]]`, in order of creation; the same for a seed whatever
    /// the policy (only their jobs' pending times depend on it).
    pub fn pipelines(&self) -> Vec<Pipeline> {
        pipeline::draw(&self.projects, self.start, self.seed)
    }
}
