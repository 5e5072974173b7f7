//! When a pipeline in flight's jobs are due: the next stage's, from the stage running now and
//! the project's learned shape, and the current stage's that are still on their way to the
//! pool.

use super::shape::{ProjectShape, Run, StageRun};
use super::stage_shape::StageShape;
use super::{ClassScope, Horizon};
use crate::core::Millis;

/// The next stage of a pipeline in flight: how many jobs, and when their machines are to be
/// asked for, or made pending already (`released`, at the end that released it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Due {
    pub(super) jobs: u32,
    /// Slots in scope the stage before them holds now: free when they become pending.
    pub(super) freed: u32,
    pub(super) at: Millis,
    pub(super) released: bool,
}

/// When the next stage's machines are asked for, per current stage of one project: every
/// pipeline of the project in that stage asks the same time after the stage started
/// ([`super::ask_after`]), and a pass asks for every pipeline in flight, so each stage's is
/// read once a pass rather than once a pipeline.
#[derive(Debug, Default)]
pub(super) struct Asks<'a> {
    by_stage: Vec<(&'a str, Option<Millis>)>,
}

impl<'a> Asks<'a> {
    fn after_start(
        &mut self,
        stage: &'a str,
        learned: &StageShape,
        horizon: &Horizon,
    ) -> Option<Millis> {
        if let Some(&(_, ask)) = self.by_stage.iter().find(|(name, _)| *name == stage) {
            return ask;
        }
        let ask = learned.ask_after(&horizon.boots, horizon.late);
        self.by_stage.push((stage, ask));
        ask
    }
}

/// The next stage of `run`, if the project's shape says what follows its current stage and how
/// long that takes: its machines asked for at the moment [`super::ask_after`] reads from the
/// stage's recent durations and the pool's boots while the current stage runs, its jobs those
/// of `scope`. A stage that has run twice its usual (median) time is no longer
/// described by the shape (a slow runner, a hung job): its next stage is not forecast, rather
/// than holding machines for it indefinitely. A stage whose jobs all ended has released the
/// next one ([`released`]). A pipeline a failed job stopped has no next stage (GitLab skips
/// it).
pub(super) fn next_stage_due<'a>(
    project: &ProjectShape,
    run: &'a Run,
    (now, horizon): (Millis, Horizon),
    scope: ClassScope<'_>,
    asks: &mut Asks<'a>,
) -> Option<Due> {
    if run.stopped() {
        return None;
    }
    let lead_time = horizon.lead_time;
    let current = run.current_stage()?;
    let learned = project.stage(&current.name)?;
    let duration = learned.usual_duration()?;
    // What GitLab announced is exact; the shape says when, and how its jobs split by class.
    let (next, jobs) = match run.announced_next() {
        Some(Some((next, jobs))) => (next, learned.share_in(scope, Some(next), jobs)),
        Some(None) => return None,
        None => (
            learned.next_stage_name()?,
            learned.next_stage_jobs_in(scope)?,
        ),
    };
    if current.running == 0 {
        return released(run, current, next, jobs, (now, lead_time));
    }
    let at =
        current
            .started_at
            .saturating_add(asks.after_start(&current.name, learned, &horizon)?);
    if now
        > current
            .started_at
            .saturating_add(duration.saturating_mul(2))
    {
        return None;
    }
    Some(Due {
        jobs,
        freed: current.running_in(scope),
        at,
        released: false,
    })
}

/// The current stage's jobs still on their way to the pool after its first job started. GitLab
/// makes a stage's jobs pending together, but they reach the pool one intake request at a
/// time, and the first often starts at once on the machine the stage before freed (its sidecar
/// asks again as soon as its job ends): the stage is then current, no longer next, and without
/// this the slots kept for the rest would go to other jobs or be released while they are on
/// their way. Held as the stage's expected jobs (GitLab's count, or the median of its other
/// recent pipelines') less those the pool knows of, once the stage before has no job running
/// (with `needs` the rest may be waiting for other jobs, not on their way), for at most a lead
/// time after the stage started.
pub(super) fn on_their_way(
    project: &ProjectShape,
    run: &Run,
    (now, lead_time): (Millis, Millis),
    scope: ClassScope<'_>,
) -> u32 {
    let Some(current) = run.current_stage() else {
        return 0;
    };
    let Some(before) = run.stage_before(&current.name) else {
        return 0;
    };
    if before.running > 0 || now > current.started_at.saturating_add(lead_time) {
        return 0;
    }
    let Some(learned) = project.stage(&before.name) else {
        return 0;
    };
    let expected = match run.announced_jobs(&current.name) {
        Some(jobs) => learned.share_in(scope, Some(&current.name), jobs),
        None => learned
            .jobs_expected_in(scope, &current.name, run.pipeline)
            .unwrap_or(0),
    };
    expected.saturating_sub(run.known_of(current))
}

/// The next stage's jobs still on their way to the pool after the stage before it ended.
/// GitLab makes them pending when that stage's last job ends, but they reach the pool only
/// after GitLab's pipeline processing and the intake's next request: in between they are
/// neither running nor waiting here, and a pass then would release the very machines they
/// need (the pass a job's end triggers comes in exactly that gap). They are held as pending
/// until they arrive, for at most one lead time after the end: a next stage that has not come
/// by then (a failed job stopped the pipeline) is not coming soon, and a machine made for it
/// at the end would have been ready by then. Arrivals are counted over every class, so a pool
/// with classes may hold fewer than its class's share, never more.
fn released(
    run: &Run,
    current: &StageRun,
    next: &str,
    jobs: u32,
    (now, lead_time): (Millis, Millis),
) -> Option<Due> {
    let end = run.last_end().filter(|&end| end >= current.started_at)?;
    if now > end.saturating_add(lead_time) {
        return None;
    }
    Some(Due {
        jobs: jobs.saturating_sub(run.arrived_of(next)),
        freed: 0,
        at: end,
        released: true,
    })
}
