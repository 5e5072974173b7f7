//! One project's learned pipeline shape and its pipelines in flight.
//!
//! A stage's duration is taken from its first job's start to the end of the pipeline's last
//! job that ended before the next stage's first job started: under GitLab's stages that is the
//! end of the stage's last job, the moment the next stage becomes pending; with `needs` it is
//! the end of a job the next one waited for, or earlier, never later. Starts and not pending
//! times are what the payloads tell, and a start's wait for a machine must not lengthen what
//! is learned: the end of the previous job does not include it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::schedules::Schedules;
use super::stage_shape::StageShape;
use super::{ClassScope, MAX_JOBS_PER_STAGE, MAX_RUNS, MAX_STAGES, StagedJob};
use crate::core::Millis;

/// A stage of a pipeline in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRun {
    pub name: String,
    /// When its first job started.
    pub started_at: Millis,
    /// Jobs started now and not ended.
    pub running: u32,
    /// The names of its jobs started (a retried job counts once).
    pub(super) jobs: BTreeSet<String>,
    /// How many of those routed to each machine class.
    #[serde(default)]
    pub(super) classes: BTreeMap<String, u32>,
}

impl StageRun {
    /// How many of its jobs started (a retried job counts once).
    pub fn started(&self) -> u32 {
        u32::try_from(self.jobs.len()).unwrap_or(u32::MAX)
    }

    /// Its running jobs whose slots are in `scope`: for a class, only when the whole stage went
    /// to it (running jobs are not told apart by class).
    pub fn running_in(&self, scope: ClassScope<'_>) -> u32 {
        let mine = match scope {
            ClassScope::All => true,
            ClassScope::Class { is_default, .. } if self.classes.is_empty() => is_default,
            ClassScope::Class { name, .. } => self.classes.keys().all(|class| class == name),
        };
        if mine { self.running } else { 0 }
    }
}

/// A pipeline in flight.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub(super) pipeline: u64,
    last_seen: Millis,
    /// In the order their first jobs started.
    stages: Vec<StageRun>,
    /// The latest end of one of its jobs.
    last_end: Option<Millis>,
    /// Its stages still to come as GitLab listed them (its `created` jobs, by stage in
    /// pipeline order), when the look-ahead asked: exact, where the shape is a median.
    #[serde(default)]
    announced: Option<Vec<(String, u32)>>,
    /// Jobs (stage, name) that reached the pool, of the current stage and those not started:
    /// a stage's jobs no longer on their way from GitLab ([`Run::arrived_of`],
    /// [`Run::known_of`]).
    #[serde(default)]
    pub(super) arrived: BTreeSet<(String, String)>,
    /// The job (stage, name) whose failure stopped it: GitLab skips the stages after a failed
    /// job, so none is forecast until a job of it comes again (its retry, or a later stage:
    /// then that job may fail, `StageShape::may_fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<(String, String)>,
}

impl Run {
    /// The stage GitLab announced to come next, with its job count: the first announced
    /// stage not started yet. `None`: nothing was announced; `Some(None)`: nothing comes.
    pub fn announced_next(&self) -> Option<Option<(&str, u32)>> {
        let announced = self.announced.as_ref()?;
        Some(
            announced
                .iter()
                .find(|(name, _)| self.stages.iter().all(|s| &s.name != name))
                .map(|(name, jobs)| (name.as_str(), *jobs)),
        )
    }

    /// Whether GitLab announced `stage` among this pipeline's stages to come.
    pub fn announced(&self, stage: &str) -> bool {
        self.announced
            .as_ref()
            .is_some_and(|a| a.iter().any(|(name, _)| name == stage))
    }

    /// Whether a failed job stopped it: no stage after it is coming.
    pub fn stopped(&self) -> bool {
        self.failed.is_some()
    }

    /// `job` of it came after a failure had stopped it: its retry (the failed job again) or a
    /// later stage goes on; the failed job when a later stage came after it (so it may fail).
    /// Another job of the failed job's stage was on its way already and changes nothing.
    fn goes_on(&mut self, job: StagedJob<'_>) -> Option<(String, String)> {
        let (stage, name) = self.failed.as_ref()?;
        if *stage != job.stage {
            return self.failed.take();
        }
        if *name == job.name {
            self.failed = None;
        }
        None
    }

    /// The stage that started last.
    pub fn current_stage(&self) -> Option<&StageRun> {
        self.stages.last()
    }

    /// The stage `name` follows in this run: the one before it, or the current stage if
    /// `name` has not started.
    pub fn stage_before(&self, name: &str) -> Option<&StageRun> {
        match self.stages.iter().position(|s| s.name == name) {
            Some(position) => self.stages[..position].last(),
            None => self.stages.last(),
        }
    }

    /// How many jobs of stage `name` reached the pool before the stage started.
    pub fn arrived_of(&self, name: &str) -> u32 {
        let n = self
            .arrived
            .iter()
            .filter(|(stage, _)| stage == name)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// How many of `stage`'s jobs the pool knows of: started, or arrived and not started yet.
    pub fn known_of(&self, stage: &StageRun) -> u32 {
        let arrived_only = self
            .arrived
            .iter()
            .filter(|(s, name)| *s == stage.name && !stage.jobs.contains(name))
            .count();
        stage
            .started()
            .saturating_add(u32::try_from(arrived_only).unwrap_or(u32::MAX))
    }

    /// The number of `created` jobs GitLab listed for `stage`, if the look-ahead asked.
    pub fn announced_jobs(&self, stage: &str) -> Option<u32> {
        self.announced
            .as_ref()?
            .iter()
            .find(|(name, _)| name == stage)
            .map(|&(_, jobs)| jobs)
    }

    /// When the pipeline's latest job ended.
    pub fn last_end(&self) -> Option<Millis> {
        self.last_end
    }

    fn is_running(&self) -> bool {
        self.stages.iter().any(|s| s.running > 0)
    }
}

/// A project: the shapes of its stages, its pipelines in flight and its scheduled runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectShape {
    last_seen: Millis,
    stages: BTreeMap<String, StageShape>,
    runs: Vec<Run>,
    /// Learned before schedules were read: none.
    #[serde(default)]
    pub schedules: Schedules,
}

impl ProjectShape {
    pub fn last_seen(&self) -> Millis {
        self.last_seen
    }

    pub fn touch(&mut self, at: Millis) {
        self.last_seen = self.last_seen.max(at);
    }

    pub fn stage(&self, name: &str) -> Option<&StageShape> {
        self.stages.get(name)
    }

    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter()
    }

    pub fn job_started(&mut self, job: StagedJob<'_>, at: Millis) {
        let index = self.run_index(job.pipeline, at);
        let went_on = self.runs[index].goes_on(job);
        self.learn_may_fail(went_on);
        let run = &mut self.runs[index];
        run.last_seen = at;
        let position = match run.stages.iter().position(|s| s.name == job.stage) {
            Some(position) => position,
            None if run.stages.len() < MAX_STAGES => {
                let (previous, release) = (run.current_stage().cloned(), run.last_end);
                // The stages before it are over: their arrivals tell nothing any more.
                run.arrived.retain(|(stage, _)| {
                    stage == job.stage || run.stages.iter().all(|s| &s.name != stage)
                });
                run.stages.push(StageRun {
                    name: job.stage.to_string(),
                    started_at: at,
                    running: 0,
                    jobs: BTreeSet::new(),
                    classes: BTreeMap::new(),
                });
                if let Some(previous) = previous {
                    self.learn_transition(&previous, job.stage, release, job.pipeline, at);
                }
                self.runs[index].stages.len() - 1
            }
            None => return,
        };
        let stage = &mut self.runs[index].stages[position];
        stage.running += 1;
        if stage.jobs.len() < MAX_JOBS_PER_STAGE
            && stage.jobs.insert(job.name.to_string())
            && let Some(class) = job.class
        {
            *stage.classes.entry(class.to_string()).or_default() += 1;
        }
        let previous = position
            .checked_sub(1)
            .map(|p| self.runs[index].stages[p].name.clone());
        if let Some(previous) = previous
            && let Some(shape) = self.stages.get_mut(&previous)
        {
            let run = &self.runs[index].stages[position];
            shape.next_stage_had(job.stage, job.pipeline, (run.started(), &run.classes));
        }
    }

    /// `job` reached the pool (taken from GitLab) at `at`; remembered until the stage after
    /// its own starts.
    pub fn job_arrived(&mut self, job: StagedJob<'_>, at: Millis) {
        let Some(run) = self.runs.iter_mut().find(|r| r.pipeline == job.pipeline) else {
            return;
        };
        run.last_seen = at;
        let went_on = run.goes_on(job);
        // Room for the current stage's jobs and the next one's, each as large as a stage gets.
        if run.arrived.len() < 2 * MAX_JOBS_PER_STAGE {
            run.arrived
                .insert((job.stage.to_string(), job.name.to_string()));
        }
        self.learn_may_fail(went_on);
    }

    /// GitLab lists `stages` (name, jobs `created`) as still to come in `pipeline`.
    pub fn announce(&mut self, pipeline: u64, stages: Vec<(String, u32)>, at: Millis) {
        let index = self.run_index(pipeline, at);
        let mut stages = stages;
        stages.truncate(MAX_STAGES);
        self.runs[index].announced = Some(stages);
    }

    pub fn job_ended(&mut self, job: StagedJob<'_>, at: Millis) {
        let Some(run) = self.runs.iter_mut().find(|r| r.pipeline == job.pipeline) else {
            return;
        };
        run.last_seen = at;
        run.last_end = Some(run.last_end.map_or(at, |end| end.max(at)));
        if let Some(stage) = run.stages.iter_mut().find(|s| s.name == job.stage) {
            stage.running = stage.running.saturating_sub(1);
        }
    }

    /// `job` ended as failed at `at` (GitLab took a `failed` state, or ended it while it ran:
    /// canceled). GitLab then skips the stages after it, so its pipeline's next stage is no
    /// longer forecast, unless a failure of this job was seen not to stop one before
    /// (`allow_failure`). A retry of it, or a later stage coming, lifts that.
    pub fn job_failed(&mut self, job: StagedJob<'_>, at: Millis) {
        self.job_ended(job, at);
        if self
            .stages
            .get(job.stage)
            .is_some_and(|s| s.may_fail(job.name))
        {
            return;
        }
        if let Some(run) = self.runs.iter_mut().find(|r| r.pipeline == job.pipeline) {
            run.failed = Some((job.stage.to_string(), job.name.to_string()));
        }
    }

    /// A later stage came after the failure of `failed` (stage, name): that job may fail.
    fn learn_may_fail(&mut self, failed: Option<(String, String)>) {
        if let Some((stage, name)) = failed
            && let Some(shape) = self.stages.get_mut(&stage)
        {
            shape.failed_without_stopping(&name);
        }
    }

    /// `next` started after `previous` in `pipeline`, the last job before it having ended at
    /// `release`: `previous` is followed by `next` and ran until `release`.
    fn learn_transition(
        &mut self,
        previous: &StageRun,
        next: &str,
        release: Option<Millis>,
        pipeline: u64,
        at: Millis,
    ) {
        let shape = self.stage_shape(&previous.name, at);
        shape.followed_by(next);
        // No job ended since the previous stage began: the next one did not wait for it
        // (`needs: []`), which says nothing of its duration.
        if let Some(release) = release.filter(|&r| r >= previous.started_at) {
            shape.took(pipeline, release - previous.started_at);
        }
    }

    /// The shape of stage `name`, made if new (forgetting the least recently seen when full).
    fn stage_shape(&mut self, name: &str, at: Millis) -> &mut StageShape {
        if !self.stages.contains_key(name) && self.stages.len() >= MAX_STAGES {
            let stalest = self
                .stages
                .iter()
                .min_by_key(|(_, s)| s.last_seen())
                .map(|(n, _)| n.clone());
            if let Some(stalest) = stalest {
                self.stages.remove(&stalest);
            }
        }
        let shape = self.stages.entry(name.to_string()).or_default();
        shape.seen(at);
        shape
    }

    /// The index of `pipeline`'s run, made if new. When full, a finished pipeline goes first
    /// (the least recently seen), else the least recently seen of all.
    fn run_index(&mut self, pipeline: u64, at: Millis) -> usize {
        if let Some(index) = self.runs.iter().position(|r| r.pipeline == pipeline) {
            return index;
        }
        if self.runs.len() >= MAX_RUNS
            && let Some(stalest) = (0..self.runs.len())
                .min_by_key(|&i| (self.runs[i].is_running(), self.runs[i].last_seen))
        {
            self.runs.swap_remove(stalest);
        }
        self.runs.push(Run {
            pipeline,
            last_seen: at,
            stages: Vec::new(),
            last_end: None,
            announced: None,
            arrived: BTreeSet::new(),
            failed: None,
        });
        self.runs.len() - 1
    }
}
