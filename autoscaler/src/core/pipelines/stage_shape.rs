//! What is learned of one stage of a project: how long it runs until the next stage is
//! pending, which stage follows it, and that stage's jobs, by machine class.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::{BootTimes, ClassScope, MAX_JOBS_PER_STAGE, RECENT_PIPELINES};
use crate::core::Millis;

/// Durations of a stage's runs kept, at most: its next stage's machines are timed from all of
/// them ([`super::ask_after`]).
pub const DURATIONS_KEPT: usize = 32;

/// The last `KEPT` observations of one figure ([`RECENT_PIPELINES`] unless said), one per
/// pipeline: a pipeline that observes it again (another job of the stage started) replaces its
/// own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recent<T, const KEPT: usize = RECENT_PIPELINES> {
    by_pipeline: VecDeque<(u64, T)>,
}

impl<T, const KEPT: usize> Default for Recent<T, KEPT> {
    fn default() -> Self {
        Self {
            by_pipeline: VecDeque::new(),
        }
    }
}

impl<T: Copy + Ord, const KEPT: usize> Recent<T, KEPT> {
    pub fn record(&mut self, pipeline: u64, value: T) {
        if let Some(seen) = self.by_pipeline.iter_mut().find(|(p, _)| *p == pipeline) {
            seen.1 = value;
            return;
        }
        if self.by_pipeline.len() == KEPT {
            self.by_pipeline.pop_front();
        }
        self.by_pipeline.push_back((pipeline, value));
    }

    /// The median (the lower one of an even count): one odd pipeline does not move it.
    pub fn median(&self) -> Option<T> {
        median(self.by_pipeline.iter().map(|&(_, v)| v))
    }

    /// The last `count` observations, oldest first.
    fn last(&self, count: usize) -> impl Iterator<Item = T> + '_ {
        let skip = self.by_pipeline.len().saturating_sub(count);
        self.by_pipeline.iter().skip(skip).map(|&(_, v)| v)
    }

    /// The median of the other pipelines' observations than `pipeline`'s: what a pipeline
    /// still making its own (its stage's jobs still starting) is expected to reach.
    pub fn median_without(&self, pipeline: u64) -> Option<T> {
        median(
            self.by_pipeline
                .iter()
                .filter(|&&(p, _)| p != pipeline)
                .map(|&(_, v)| v),
        )
    }
}

fn median<T: Copy + Ord>(values: impl Iterator<Item = T>) -> Option<T> {
    let mut values: Vec<T> = values.collect();
    values.sort_unstable();
    values.get(values.len().checked_sub(1)? / 2).copied()
}

/// What is learned of one stage of a project.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageShape {
    last_seen: Millis,
    /// The last [`DURATIONS_KEPT`] runs' durations: the usual one is read from the last
    /// [`RECENT_PIPELINES`], the next stage's timing from all.
    durations: Recent<Millis, DURATIONS_KEPT>,
    next: Option<NextStage>,
    /// Jobs of the stage whose failure a later stage of the same pipeline came after
    /// (`allow_failure`, which the payload does not carry): their failures do not stop the
    /// forecast ([`super::shape::ProjectShape::job_failed`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    may_fail: BTreeSet<String>,
}

/// The stage seen following another, and its job counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NextStage {
    name: String,
    jobs: Recent<u32>,
    /// Its jobs per machine class in its latest run (empty: none had a class). Shapes saved
    /// before classes were learned read as empty.
    #[serde(default)]
    classes: BTreeMap<String, u32>,
}

impl StageShape {
    /// How long the stage usually runs, until the next stage is pending.
    pub fn usual_duration(&self) -> Option<Millis> {
        median(self.durations.last(RECENT_PIPELINES))
    }

    /// How long after the stage starts its next stage's machines are asked for
    /// ([`super::ask_after`], from every duration kept).
    pub fn ask_after(&self, boots: &BootTimes, late: Millis) -> Option<Millis> {
        super::ask_after(self.durations.last(DURATIONS_KEPT), boots, late)
    }

    /// The stage learned to follow it.
    pub fn next_stage_name(&self) -> Option<&str> {
        self.next.as_ref().map(|n| n.name.as_str())
    }

    /// How many jobs the stage after it usually has.
    pub fn next_stage_jobs(&self) -> Option<u32> {
        self.next.as_ref()?.jobs.median()
    }

    /// How many jobs stage `name`, following this one in `pipeline`, is expected to have in
    /// `scope`, from the other recent pipelines (`pipeline`'s own count is still rising while
    /// its jobs start): `None` unless `name` is the stage learned to follow.
    pub fn jobs_expected_in(
        &self,
        scope: ClassScope<'_>,
        name: &str,
        pipeline: u64,
    ) -> Option<u32> {
        let next = self.next.as_ref().filter(|n| n.name == name)?;
        let jobs = next.jobs.median_without(pipeline)?;
        Some(self.share_in(scope, Some(name), jobs))
    }

    /// How many of the next stage's usual jobs are in `scope`: its usual count in the shares
    /// its classes had in its latest run, rounded up (a class with one job of eight holds a
    /// slot for it). A stage whose classes were never seen counts whole in the default class.
    pub fn next_stage_jobs_in(&self, scope: ClassScope<'_>) -> Option<u32> {
        let jobs = self.next_stage_jobs()?;
        Some(self.share_in(scope, self.next.as_ref().map(|n| n.name.as_str()), jobs))
    }

    /// The share of `jobs` of stage `next` that is in `scope`: the shares of the classes of
    /// the stage learned to follow, when that is `next`; otherwise, or with no class seen,
    /// all of them in the default class.
    pub fn share_in(&self, scope: ClassScope<'_>, next: Option<&str>, jobs: u32) -> u32 {
        let ClassScope::Class { name, is_default } = scope else {
            return jobs;
        };
        let learned = self.next.as_ref().filter(|n| Some(n.name.as_str()) == next);
        let seen: u32 = learned.map_or(0, |n| n.classes.values().sum());
        if seen == 0 {
            return if is_default { jobs } else { 0 };
        }
        let mine = learned
            .and_then(|n| n.classes.get(name))
            .copied()
            .unwrap_or(0);
        let share = (u64::from(jobs) * u64::from(mine)).div_ceil(u64::from(seen));
        u32::try_from(share).unwrap_or(u32::MAX)
    }

    /// Whether `name` is the stage learned to follow, with its duration and job count known.
    pub fn is_followed_by(&self, name: &str) -> bool {
        self.next.as_ref().is_some_and(|n| n.name == name)
            && self.usual_duration().is_some()
            && self.next_stage_jobs().is_some()
    }

    /// `name` followed this stage: a different stage than before starts its counts afresh
    /// (the shape changed: a stage added or removed).
    pub(super) fn followed_by(&mut self, name: &str) {
        if self.next.as_ref().is_none_or(|n| n.name != name) {
            self.next = Some(NextStage {
                name: name.to_string(),
                jobs: Recent::default(),
                classes: BTreeMap::new(),
            });
        }
    }

    /// The stage after this one, named `name`, had `jobs` started in `pipeline`, by class.
    pub(super) fn next_stage_had(
        &mut self,
        name: &str,
        pipeline: u64,
        (jobs, classes): (u32, &BTreeMap<String, u32>),
    ) {
        if let Some(next) = self.next.as_mut().filter(|n| n.name == name) {
            next.jobs.record(pipeline, jobs);
            next.classes.clone_from(classes);
        }
    }

    /// The stage ran `duration` in `pipeline`, until its next stage was pending.
    pub(super) fn took(&mut self, pipeline: u64, duration: Millis) {
        self.durations.record(pipeline, duration);
    }

    /// Whether a failure of its job `name` was seen not to stop its pipeline.
    pub fn may_fail(&self, name: &str) -> bool {
        self.may_fail.contains(name)
    }

    /// Its job `name` failed and a later stage of the same pipeline came all the same.
    pub(super) fn failed_without_stopping(&mut self, name: &str) {
        if self.may_fail.len() < MAX_JOBS_PER_STAGE {
            self.may_fail.insert(name.to_string());
        }
    }

    /// A job of the stage was seen at `at`.
    pub(super) fn seen(&mut self, at: Millis) {
        self.last_seen = self.last_seen.max(at);
    }

    /// When a job of the stage was last seen: the least recently seen is forgotten first.
    pub(super) fn last_seen(&self) -> Millis {
        self.last_seen
    }
}
