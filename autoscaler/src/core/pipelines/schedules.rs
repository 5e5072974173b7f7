//! A project's pipeline schedules: the runs GitLab says are coming, held for ahead of time.
//!
//! A scheduled pipeline's first stage is demand nothing before it foretells (it comes after a
//! quiet spell, often with other schedules set for the same minute), yet GitLab knows when it
//! comes: each active schedule's `next_run_at` (`GET /projects/:id/pipeline_schedules`). GitLab
//! creates the pipeline at or after that moment (its schedule worker picks up the schedules
//! whose time has passed), never before. So a run is held for from a horizon before its time,
//! as a next stage is, until its pipeline arrives (a job whose `CI_PIPELINE_SOURCE` is
//! `schedule`), or for at most one lead time after its time: a run that has not come by then
//! (the schedule was deactivated, GitLab is late) is not coming soon, and a machine made for
//! it would have been ready by then. Runs set for the same time are one batch: GitLab's
//! schedule worker picks them up in one pass and its background jobs create their pipelines
//! one after another, so while the batch's pipelines still come (one came within the last lead
//! time) the rest of it is coming too, and stays held. A run holds one job: a pipeline's first
//! stage has at least one, and how many more is not known before the pipeline exists.

use serde::{Deserialize, Serialize};

use crate::core::Millis;

/// Runs remembered per project (schedules whose time has not passed, and those still awaited).
const MAX_SCHEDULED: usize = 200;
/// Jobs a scheduled run holds for.
const JOBS_PER_RUN: u32 = 1;
/// How long a run whose time has passed is remembered: the forecast stops holding for it a
/// lead time after its time; this bounds memory, and keeps a match while its pipeline's jobs
/// still arrive (an hour: the longest window a forecast looks back over).
const PASSED_KEPT: Millis = 3_600_000;

/// One scheduled run GitLab listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ScheduledRun {
    /// GitLab's `next_run_at`: the pipeline is created at or after it.
    at: Millis,
    /// The pipeline that came for it, once one did.
    pipeline: Option<u64>,
    /// That pipeline's jobs seen arriving.
    arrived: u32,
    /// When that pipeline's first job arrived.
    #[serde(default)]
    came_at: Option<Millis>,
}

/// A project's scheduled runs, in order of time.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Schedules {
    runs: Vec<ScheduledRun>,
}

impl Schedules {
    /// GitLab lists `next_runs` (each active schedule's `next_run_at`) at `now`. The list
    /// replaces the runs still ahead: one listed at the same time as a run already known is
    /// that run (so a run matched to its pipeline keeps its match), one no longer listed was
    /// deactivated. A run whose time has passed is kept a while ([`PASSED_KEPT`]): GitLab moves
    /// a schedule's `next_run_at` on when it creates the pipeline, whose jobs may reach the
    /// pool a little later.
    pub fn listed(&mut self, mut next_runs: Vec<Millis>, now: Millis) {
        next_runs.retain(|&at| at >= now);
        next_runs.sort_unstable();
        let (passed, mut ahead): (Vec<ScheduledRun>, Vec<ScheduledRun>) =
            std::mem::take(&mut self.runs)
                .into_iter()
                .partition(|r| r.at < now);
        let mut runs: Vec<ScheduledRun> = passed
            .into_iter()
            .filter(|r| now <= r.at.saturating_add(PASSED_KEPT))
            .collect();
        for at in next_runs {
            let known = ahead.iter().position(|r| r.at == at);
            runs.push(match known {
                Some(i) => ahead.swap_remove(i),
                None => ScheduledRun {
                    at,
                    pipeline: None,
                    arrived: 0,
                    came_at: None,
                },
            });
        }
        runs.sort_by_key(|r| r.at);
        runs.truncate(MAX_SCHEDULED);
        self.runs = runs;
    }

    /// A job of `pipeline`, which a schedule made, reached the pool at `at`. The first such
    /// pipeline after a run's time is that run's (GitLab never creates it earlier); returns
    /// whether the job is one a run held for.
    pub fn job_arrived(&mut self, pipeline: u64, at: Millis) -> bool {
        let run = match self.runs.iter().position(|r| r.pipeline == Some(pipeline)) {
            Some(i) => &mut self.runs[i],
            None => {
                let Some(run) = self
                    .runs
                    .iter_mut()
                    .find(|r| r.pipeline.is_none() && r.at <= at)
                else {
                    return false;
                };
                run.pipeline = Some(pipeline);
                run.came_at = Some(at);
                run
            }
        };
        run.arrived = run.arrived.saturating_add(1);
        run.arrived <= JOBS_PER_RUN
    }

    /// Jobs held for at `now`: each run not yet come, from `ahead` before its time until a
    /// lead time after it, or after the latest pipeline of its batch (the runs set for the
    /// same time) came, whichever is later.
    pub fn jobs_due(&self, now: Millis, ahead: Millis, lead_time: Millis) -> u32 {
        let due = self
            .runs
            .iter()
            .filter(|r| r.pipeline.is_none() && r.at <= now.saturating_add(ahead))
            .filter(|r| now <= self.batch_last_came(r.at).saturating_add(lead_time))
            .count();
        u32::try_from(due)
            .unwrap_or(u32::MAX)
            .saturating_mul(JOBS_PER_RUN)
    }

    /// When the latest pipeline of the runs set for `at` came, or `at` itself if none came
    /// after it.
    fn batch_last_came(&self, at: Millis) -> Millis {
        self.runs
            .iter()
            .filter(|r| r.at == at)
            .filter_map(|r| r.came_at)
            .fold(at, Millis::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAD: Millis = 60_000;

    #[test]
    fn a_run_is_held_from_the_horizon_until_a_lead_time_after_its_time() {
        let mut s = Schedules::default();
        s.listed(vec![7_200_000, 7_200_000, 90_000_000], 0);
        let due = |s: &Schedules, now| s.jobs_due(now, 40_000, LEAD);
        assert_eq!(due(&s, 7_200_000 - 40_001), 0, "before the horizon");
        assert_eq!(
            due(&s, 7_200_000 - 40_000),
            2,
            "two schedules set for 02:00"
        );
        assert_eq!(due(&s, 7_200_000 + LEAD), 2);
        assert_eq!(
            due(&s, 7_200_000 + LEAD + 1),
            0,
            "not come a lead time after"
        );
    }

    #[test]
    fn a_batch_still_coming_holds_its_runs_not_yet_come() {
        let mut s = Schedules::default();
        s.listed(vec![7_200_000; 3], 0);
        let due = |s: &Schedules, now| s.jobs_due(now, 40_000, LEAD);
        // GitLab creates the batch's pipelines one after another: two come, the second
        // after the first's lead time has passed.
        assert!(s.job_arrived(1, 7_230_000));
        assert!(s.job_arrived(2, 7_250_000));
        assert_eq!(
            due(&s, 7_200_000 + LEAD + 30_000),
            1,
            "the batch still comes: its third run is held past a lead time after its time"
        );
        assert_eq!(due(&s, 7_250_000 + LEAD), 1);
        assert_eq!(
            due(&s, 7_250_000 + LEAD + 1),
            0,
            "nothing of the batch came for a lead time"
        );
    }

    #[test]
    fn a_scheduled_pipeline_takes_the_earliest_run_whose_time_has_passed() {
        let mut s = Schedules::default();
        s.listed(vec![100_000, 200_000], 0);
        // GitLab never creates a scheduled pipeline before its time: one that comes earlier
        // (a schedule run by hand) is no run's.
        assert!(!s.job_arrived(7, 99_000));
        assert_eq!(
            s.jobs_due(99_000, LEAD, LEAD),
            1,
            "the 100 s run is still awaited"
        );
        assert!(
            s.job_arrived(8, 101_000),
            "the run's first job was held for"
        );
        assert!(!s.job_arrived(8, 101_500), "its second was not");
        assert_eq!(s.jobs_due(150_000, LEAD, LEAD), 1, "the 200 s run is left");
    }

    #[test]
    fn a_new_list_keeps_runs_still_awaited_and_matched() {
        let mut s = Schedules::default();
        s.listed(vec![100_000, 300_000], 0);
        s.job_arrived(8, 100_500);
        // At 120 s GitLab lists the next day's 100 s run and still the 300 s one: the passed
        // run, matched, is not held again, and the new one is added.
        s.listed(vec![300_000, 86_500_000], 120_000);
        assert_eq!(s.jobs_due(120_000, LEAD, LEAD), 0);
        assert_eq!(s.jobs_due(300_000, LEAD, LEAD), 1);
        // A run listed no more before its time (the schedule was deactivated) is dropped.
        s.listed(vec![86_500_000], 130_000);
        assert_eq!(s.jobs_due(300_000, LEAD, LEAD), 0);
    }

    #[test]
    fn a_run_listed_again_at_its_very_time_keeps_its_match() {
        let mut s = Schedules::default();
        s.listed(vec![100_000, 100_000], 0);
        assert!(s.job_arrived(8, 100_000));
        // Listed again at that very moment: still two runs, one of them come.
        s.listed(vec![100_000, 100_000], 100_000);
        assert_eq!(s.jobs_due(100_000, LEAD, LEAD), 1);
        assert!(!s.job_arrived(8, 100_000), "the come run's second job");
        assert!(s.job_arrived(9, 100_000), "the other run's pipeline");
    }
}
