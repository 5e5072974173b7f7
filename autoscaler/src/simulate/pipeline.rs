//! Pipelines in a workload: each project runs one pipeline shape (stages in order, jobs per
//! stage, optional `needs`) at a rate over time windows. Only the pipelines' creation times and
//! their jobs' run times are drawn here; when a job becomes pending depends on when the jobs
//! before it finished, which depends on the policy, so the engine releases them as it runs
//! ([`super::release`]).
//!
//! ```toml
//! [[pipelines]]
//! project = "monorepo"
//! class = "default"                  # the pool that serves all of this project's jobs
//! [[pipelines.windows]]
//! from = "8h"                        # offsets from start
//! to = "18h"
//! pipelines_per_hour = 6             # Poisson, or
//! # pipelines = 20                   # exactly this many, at times uniform over [from, to)
//! # scheduled = true                 # pipeline schedules set for `from` (GitLab lists them
//! #                                  # ahead; the worker creates each in [from, to))
//! [[pipelines.stages]]
//! name = "build"
//! jobs = ["compile"]                 # job names, or a count: 8 makes "test 1/8" … "test 8/8"
//! duration = ["3m", "5m"]            # each job's run time, uniform in this range
//! [[pipelines.stages]]
//! name = "deploy"
//! jobs = ["package", "publish"]
//! duration = "1m"
//! needs = { package = ["compile"] }  # pending once these (earlier) jobs end, not the stage
//! ```

use std::collections::BTreeMap;

use figment::value::Value;

use super::draws::{HowMany, draw_times, ms, read_how_many, read_range, uniform};
use super::rng::Rng;
use crate::config::reader::Section;
use crate::config::values;
use crate::core::Millis;

/// Keeps the pipelines' draws apart from the arrivals', so that adding pipelines to a workload
/// leaves its other jobs as they were.
const PIPELINE_SALT: u64 = 0x5049_5045_4c49_4e45;

/// One `[[pipelines]]` entry: a project and the shape of its pipelines.
#[derive(Debug, Clone)]
pub struct Project {
    pub name: String,
    pub class: String,
    pub windows: Vec<Window>,
    pub jobs: Vec<ShapeJob>,
}

#[derive(Debug, Clone)]
pub struct Window {
    pub from: Millis,
    pub to: Millis,
    pub how_many: HowMany,
    /// The window's pipelines are made by schedules whose `next_run_at` is `from`.
    pub scheduled: bool,
}

/// A job of a pipeline shape, in stage order (so every job it waits for comes before it).
#[derive(Debug, Clone)]
pub struct ShapeJob {
    pub stage: String,
    pub name: String,
    pub duration: (Millis, Millis),
    /// Indices of the jobs that must end before this one is pending: its `needs`, or else
    /// every job of every earlier stage (GitLab starts a stage once the ones before it passed).
    pub after: Vec<usize>,
}

/// One drawn pipeline: created at `created`, its jobs' run times fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub id: u64,
    pub project: String,
    pub class: String,
    pub created: Millis,
    /// For a scheduled pipeline, its schedule's `next_run_at` (GitLab lists it ahead).
    pub scheduled_at: Option<Millis>,
    pub jobs: Vec<PipelineJob>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineJob {
    pub stage: String,
    pub name: String,
    pub runs_for: Millis,
    pub after: Vec<usize>,
    /// Never pending before this (a replayed job's recorded ready time: a manual or delayed
    /// job, or one GitLab released late, does not come earlier because the run went faster);
    /// 0 for a drawn job.
    pub not_before: Millis,
    /// It ends as failed or canceled (a replayed job's `status`; a drawn job passes).
    pub failed: bool,
}

impl Pipeline {
    /// When each job would be pending if no job ever waited for a machine: the pipeline's own
    /// critical path (what a clairvoyant fleet sees).
    pub fn zero_wait_ready(&self) -> Vec<Millis> {
        let mut ready: Vec<Millis> = Vec::with_capacity(self.jobs.len());
        for job in &self.jobs {
            let at = job
                .after
                .iter()
                .map(|&i| ready[i] + self.jobs[i].runs_for)
                .max()
                .unwrap_or(self.created)
                .max(job.not_before);
            ready.push(at);
        }
        ready
    }
}

pub fn read_project(s: Section<'_>) -> Option<Project> {
    let name: Option<String> = s.required("project");
    let class: String = s.or("class", "default".to_string());
    let windows: Vec<Option<Window>> = s.tables("windows").into_iter().map(read_window).collect();
    if windows.is_empty() {
        s.problem("windows", "needs at least one [[pipelines.windows]] entry");
    }
    let stages = s.tables("stages");
    if stages.is_empty() {
        s.problem("stages", "needs at least one [[pipelines.stages]] entry");
    }
    let jobs = read_stages(stages);
    s.finish();
    Some(Project {
        name: name?,
        class,
        windows: windows.into_iter().collect::<Option<_>>()?,
        jobs: jobs?,
    })
}

fn read_window(s: Section<'_>) -> Option<Window> {
    let from = s.parsed("from", values::duration).map(ms).unwrap_or(0);
    let to = s.parsed("to", values::duration).map(ms);
    if to.is_none() && !s.has("to") {
        s.problem("to", "is required");
    }
    if to.is_some_and(|to| to <= from) {
        s.problem("to", "must be after from");
    }
    let how_many = read_how_many(&s, "pipelines", "pipelines_per_hour");
    let scheduled = s.or("scheduled", false);
    s.finish();
    Some(Window {
        from,
        to: to?,
        how_many: how_many?,
        scheduled,
    })
}

/// The stages in order as one list of jobs, each with the jobs it waits for.
fn read_stages(stages: Vec<Section<'_>>) -> Option<Vec<ShapeJob>> {
    let mut jobs: Vec<ShapeJob> = Vec::new();
    let mut complete = true;
    for s in stages {
        let before = jobs.len();
        let name: Option<String> = s.required("name");
        let names = s.parsed("jobs", |v| job_names(v, name.as_deref().unwrap_or("job")));
        if names.is_none() && !s.has("jobs") {
            s.problem("jobs", "is required");
        }
        let duration = read_range(&s, "duration");
        let needs: BTreeMap<String, Vec<String>> = s.or("needs", BTreeMap::new());
        let (Some(stage), Some(names), Some(duration)) = (name, names, duration) else {
            s.finish();
            complete = false;
            continue;
        };
        for job in &names {
            if jobs.iter().any(|j| &j.name == job) {
                s.problem("jobs", format!("{job:?} is a job of an earlier stage too"));
            }
        }
        for (job, needed) in &needs {
            if !names.contains(job) {
                s.problem("needs", format!("{job:?} is not a job of this stage"));
            }
            for n in needed {
                if !jobs[..before].iter().any(|j| &j.name == n) {
                    s.problem("needs", format!("{n:?} is not a job of an earlier stage"));
                }
            }
        }
        for job in names {
            let after = match needs.get(&job) {
                Some(needed) => (0..before)
                    .filter(|&i| needed.contains(&jobs[i].name))
                    .collect(),
                None => (0..before).collect(),
            };
            jobs.push(ShapeJob {
                stage: stage.clone(),
                name: job,
                duration,
                after,
            });
        }
        s.finish();
    }
    complete.then_some(jobs)
}

/// `jobs = ["a", "b"]`, or `jobs = 8`: GitLab's names for a `parallel: 8` job.
fn job_names(v: &Value, stage: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = match v {
        Value::Array(_, items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("must be job names or a number of jobs")?,
        other => match other.deserialize::<u32>().ok() {
            Some(1) => vec![stage.to_string()],
            Some(n @ 2..=1000) => (1..=n).map(|i| format!("{stage} {i}/{n}")).collect(),
            _ => return Err("must be job names or a number of jobs from 1 to 1000".into()),
        },
    };
    if names.is_empty() {
        return Err("must name at least one job".into());
    }
    Ok(names)
}

/// Every pipeline of `projects`, in order of creation, numbered from 1 in that order.
pub fn draw(projects: &[Project], start: Millis, seed: u64) -> Vec<Pipeline> {
    let mut rng = Rng::new(seed ^ PIPELINE_SALT);
    let mut pipelines = Vec::new();
    for p in projects {
        for w in &p.windows {
            for t in draw_times(&mut rng, (w.to - w.from) as f64, w.how_many, 1) {
                let jobs = p
                    .jobs
                    .iter()
                    .map(|j| PipelineJob {
                        stage: j.stage.clone(),
                        name: j.name.clone(),
                        runs_for: uniform(&mut rng, j.duration),
                        after: j.after.clone(),
                        not_before: 0,
                        failed: false,
                    })
                    .collect();
                pipelines.push(Pipeline {
                    id: 0,
                    project: p.name.clone(),
                    class: p.class.clone(),
                    created: start + w.from + t as Millis,
                    scheduled_at: w.scheduled.then_some(start + w.from),
                    jobs,
                });
            }
        }
    }
    pipelines.sort_by_key(|p| p.created);
    for (n, p) in pipelines.iter_mut().enumerate() {
        p.id = n as u64 + 1;
    }
    pipelines
}
