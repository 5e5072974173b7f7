//! The pipeline-aware forecast: each project's pipeline shape, learned from the jobs seen, and
//! the jobs that pipelines in flight will make pending soon.
//!
//! A pipeline's first job predicts nothing to a forecast made from arrivals alone, yet the
//! stages after it are known from the project's earlier pipelines: which stage follows which,
//! how many jobs it has and how long the stage before it runs. The tracker learns those from
//! the facts GitLab's job payloads carry (`job_info.project_id`, `CI_PIPELINE_ID`,
//! `job_info.stage`, `job_info.name`) and the moments jobs start and end. For each pipeline in
//! flight, the next stage's machines are asked for at the latest moment at which the stage's
//! recent durations and the pool's recent boots leave one job in twenty waiting longer than the
//! target ([`ask_after`]: a stage that ends earlier than its median is common, and the next
//! stage's jobs would then wait for a boot); the planner holds slots for those jobs from then
//! on, so that machines are ready when they become pending and not before. Jobs so foreseen
//! are no news to the forecast from arrivals ([`PipelineTracker::foresees`]).
//!
//! With an API token, the look-ahead (`lookahead`) asks GitLab for a pipeline's jobs still
//! `created` when the pipeline is first seen: the stages to come and their exact job counts
//! ([`PipelineTracker::announce`]), which replace the learned counts for that pipeline (the
//! learned shape still says when they come, and how they split by machine class).
//!
//! With the same token it reads each project's pipeline schedules: the first stage of a
//! scheduled pipeline is held for a horizon before GitLab's `next_run_at` (`schedules`).
//!
//! Shapes change (a stage added, a job removed): the job count and the usual duration are
//! medians of the last few pipelines, and a stage followed by a different one starts afresh,
//! so a change is learned within a pipeline or two. Memory is bounded: a cap on projects, on stages and pipelines in
//! flight per project, and on the pipelines remembered per figure; the least recently seen go.
//!
//! Pure: time comes in as an argument.

mod due;
mod schedules;
mod shape;
mod stage_shape;
mod timing;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use self::due::{Asks, next_stage_due, on_their_way};
use self::shape::ProjectShape;
pub use self::stage_shape::DURATIONS_KEPT;
pub use self::timing::{BOOTS_KEPT, BootTimes, ask_after};
use super::Millis;

/// Projects remembered; beyond it the one seen least recently is forgotten.
pub const MAX_PROJECTS: usize = 500;
/// Pipelines followed at once per project (running ones; finished ones are forgotten first).
pub const MAX_RUNS: usize = 64;
/// Stages remembered per project.
pub const MAX_STAGES: usize = 64;
/// Pipelines each figure (a stage's duration, the next stage's job count) is the median of:
/// an odd number, so that one odd pipeline does not move it and two in a row do.
pub const RECENT_PIPELINES: usize = 3;
/// Job names told apart per stage of a pipeline: GitLab's `parallel` allows 200.
pub const MAX_JOBS_PER_STAGE: usize = 200;

/// A job as GitLab places it: the facts of its payload the forecast learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedJob<'a> {
    /// `job_info.project_id` (any stable name of the project will do).
    pub project: &'a str,
    /// `CI_PIPELINE_ID`.
    pub pipeline: u64,
    /// `job_info.stage`.
    pub stage: &'a str,
    /// `job_info.name`.
    pub name: &'a str,
    /// The machine class the job routed to (`None`: the pool has no classes).
    pub class: Option<&'a str>,
}

/// Where a job sits in its pipeline, as its payload says: the owned facts a job record keeps
/// so that its start and end can be told to the tracker (with its project) long after the
/// payload was handed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelinePlace {
    pub pipeline: u64,
    pub stage: String,
    pub name: String,
    /// A pipeline schedule made the pipeline (records kept before this was read: no).
    #[serde(default)]
    pub scheduled: bool,
}

impl PipelinePlace {
    /// The job as the tracker takes it, in project `project`, routed to `class`.
    pub fn staged<'a>(&'a self, project: &'a str, class: Option<&'a str>) -> StagedJob<'a> {
        StagedJob {
            project,
            pipeline: self.pipeline,
            stage: &self.stage,
            name: &self.name,
            class,
        }
    }
}

/// Jobs that pipelines in flight will make pending, as known at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PipelineForecast {
    /// Jobs of the next stages expected to be pending within the lead time asked about.
    pub jobs_due: u32,
    /// Of `jobs_due`, the slots their own pipelines' running jobs hold: GitLab makes a stage
    /// pending when the jobs of the stage before it end, so those slots are free by then
    /// ([`Self::to_hold`]). At most each pipeline's next-stage jobs.
    pub freed: u32,
    /// Pipelines whose next stage was counted.
    pub pipelines: u32,
    /// Jobs of next stages GitLab made pending (the stage before them ended) that have not
    /// reached the pool yet: part of GitLab's queue, not of `jobs_due`.
    pub released: u32,
}

impl PipelineForecast {
    /// The free slots to hold for the next stages: their jobs due, less the slots the stages
    /// before them will free as they end. A machine that ends a stage's job is kept for the
    /// next stage (it idles at most until the stage ends, a lead time at most once the stage is
    /// due within the horizon) rather than a new one made beside it, which would boot for
    /// nothing while the freed one idled out.
    pub fn to_hold(&self) -> u32 {
        self.jobs_due.saturating_sub(self.freed)
    }
}

/// How far a forecast looks: the pool's lead time (a released stage is held at most that long
/// after it ended), how far ahead of their time a scheduled run's jobs are held (`ahead`, at
/// most the lead time), and what times a next stage's machines ([`ask_after`]): the pool's
/// recent create-to-ready times (`boots`) and how long a foreseen job may wait (`late`).
/// `early`: how long before its machines are due to be asked for a stage already counts (0
/// when machines are made for it; while jobs are rare, idle machines are kept for the stages
/// it says, see `core::demand::Forecast::keep_horizon`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    pub lead_time: Millis,
    pub ahead: Millis,
    pub late: Millis,
    pub boots: BootTimes,
    pub early: Millis,
}

impl Horizon {
    /// Every boot taking `lead_time`, no wait allowed: a next stage's machines are asked for a
    /// lead time before the 5 % quantile of its recent durations.
    pub fn lead(lead_time: Millis) -> Self {
        Self {
            lead_time,
            ahead: lead_time,
            late: 0,
            boots: BootTimes::flat(lead_time),
            early: 0,
        }
    }
}

/// Which of the next stages' jobs a forecast counts: in a pool with machine classes each class
/// holds slots only for the jobs that route to it, as a job runs only on its class's machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassScope<'a> {
    /// Every job (a pool without classes).
    All,
    /// The jobs routed to class `name`, in the shares the stage's jobs had in its last run.
    /// The pool's default class (`is_default`) also takes a stage whose classes were never
    /// seen (learned before the pool had classes): where such jobs go without a class.
    Class { name: &'a str, is_default: bool },
}

/// What one pool has learned of its projects' pipelines, and the pipelines it sees running.
/// Serialisable, so that the service keeps what it learned across restarts (times are wall
/// clock milliseconds there, so pipelines in flight stay meaningful too).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PipelineTracker {
    projects: BTreeMap<String, ProjectShape>,
}

impl PipelineTracker {
    /// `job` started running at `at`.
    pub fn job_started(&mut self, job: StagedJob<'_>, at: Millis) {
        self.project(job.project, at).job_started(job, at);
    }

    /// GitLab lists `stages` (name and number of `created` jobs, in pipeline order) as still
    /// to come in `project`'s `pipeline` (the look-ahead): the next stage's jobs are then
    /// those, not the learned count, and a pipeline with no stage to come holds nothing.
    pub fn announce(
        &mut self,
        project: &str,
        pipeline: u64,
        stages: Vec<(String, u32)>,
        at: Millis,
    ) {
        self.project(project, at).announce(pipeline, stages, at);
    }

    /// GitLab lists `next_runs` (the `next_run_at` of each of `project`'s active pipeline
    /// schedules) at `now`.
    pub fn schedules_listed(&mut self, project: &str, next_runs: Vec<Millis>, now: Millis) {
        self.project(project, now).schedules.listed(next_runs, now);
    }

    /// A job of `project`'s `pipeline`, made by a schedule (`CI_PIPELINE_SOURCE` is
    /// `schedule`), reached the pool at `at`: whether it is one a scheduled run held for (then
    /// it is no news to the forecast from arrivals, as a foreseen stage's job is not).
    pub fn scheduled_job_arrived(&mut self, project: &str, pipeline: u64, at: Millis) -> bool {
        self.projects
            .get_mut(project)
            .is_some_and(|p| p.schedules.job_arrived(pipeline, at))
    }

    /// `job` ended at `at` (whether it passed or failed: either way its slot is free, and a
    /// failed one makes the next stage never come, which the learned figures do not count).
    pub fn job_ended(&mut self, job: StagedJob<'_>, at: Millis) {
        if let Some(project) = self.projects.get_mut(job.project) {
            project.job_ended(job, at);
        }
    }

    /// `job` ended as failed at `at` ([`ProjectShape::job_failed`]): its pipeline's later
    /// stages are not forecast, as GitLab skips them, until a job of it comes again.
    pub fn job_failed(&mut self, job: StagedJob<'_>, at: Millis) {
        if let Some(project) = self.projects.get_mut(job.project) {
            project.job_failed(job, at);
        }
    }

    /// `job` reached the pool at `at` (taken from GitLab), before or after its stage started:
    /// a released stage's jobs stop being held as they come ([`PipelineForecast::released`]).
    pub fn job_arrived(&mut self, job: StagedJob<'_>, at: Millis) {
        if let Some(project) = self.projects.get_mut(job.project) {
            project.job_arrived(job, at);
        }
    }

    /// The jobs expected pending by `now + lead_time`, from every pipeline in flight whose
    /// project's shape is known. Unknown projects and stages count nothing.
    pub fn forecast(&self, now: Millis, lead_time: Millis) -> PipelineForecast {
        self.forecast_for(now, Horizon::lead(lead_time), ClassScope::All)
    }

    /// [`Self::forecast`] of the jobs in `scope` only, those due within `horizon.ahead`.
    pub fn forecast_for(
        &self,
        now: Millis,
        horizon: Horizon,
        scope: ClassScope<'_>,
    ) -> PipelineForecast {
        let mut out = PipelineForecast::default();
        for project in self.projects.values() {
            // A scheduled run's first stage has no class learned: it is the default class's.
            if matches!(
                scope,
                ClassScope::All
                    | ClassScope::Class {
                        is_default: true,
                        ..
                    }
            ) {
                let due = project
                    .schedules
                    .jobs_due(now, horizon.ahead, horizon.lead_time);
                out.jobs_due = out.jobs_due.saturating_add(due);
            }
            for run in project.runs() {
                let on_way = on_their_way(project, run, (now, horizon.lead_time), scope);
                out.released = out.released.saturating_add(on_way);
            }
            let mut asks = Asks::default();
            for due in project
                .runs()
                .filter_map(|r| next_stage_due(project, r, (now, horizon), scope, &mut asks))
            {
                if due.jobs == 0 {
                    continue;
                }
                if due.released {
                    out.released = out.released.saturating_add(due.jobs);
                } else if due.at <= now.saturating_add(horizon.early) {
                    out.jobs_due = out.jobs_due.saturating_add(due.jobs);
                    out.freed = out.freed.saturating_add(due.freed.min(due.jobs));
                    out.pipelines += 1;
                }
            }
        }
        out
    }

    /// Whether `job`, pending now, is one of the next stage's jobs the forecast expected: its
    /// pipeline is in flight and its project's shape says the stage started last is followed
    /// by `job`'s stage, or GitLab announced that stage and the shape says when it comes.
    /// (Such a job is no news to a forecast from arrivals.)
    pub fn foresees(&self, job: StagedJob<'_>) -> bool {
        let Some(project) = self.projects.get(job.project) else {
            return false;
        };
        let Some(run) = project.runs().find(|r| r.pipeline == job.pipeline) else {
            return false;
        };
        let Some(shape) = run
            .stage_before(job.stage)
            .and_then(|s| project.stage(&s.name))
        else {
            return false;
        };
        // An announced stage is held for once the stage before it has a learned duration.
        if run.announced(job.stage) {
            return shape.usual_duration().is_some();
        }
        shape.is_followed_by(job.stage)
    }

    /// Projects remembered now.
    pub fn projects(&self) -> usize {
        self.projects.len()
    }

    /// `name`'s shape, made if new (forgetting the least recently seen project when full).
    fn project(&mut self, name: &str, at: Millis) -> &mut ProjectShape {
        if !self.projects.contains_key(name) && self.projects.len() >= MAX_PROJECTS {
            let stalest = self
                .projects
                .iter()
                .min_by_key(|(_, p)| p.last_seen())
                .map(|(n, _)| n.clone());
            if let Some(stalest) = stalest {
                self.projects.remove(&stalest);
            }
        }
        let project = self.projects.entry(name.to_string()).or_default();
        project.touch(at);
        project
    }
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod tests;
