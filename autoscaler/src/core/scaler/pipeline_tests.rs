//! The planner with and without a pipeline forecast: machines for the next stages' jobs, made
//! with their own reason code, never beyond `max_machines`, never at the cost of the other
//! rules.

use proptest::prelude::*;

use super::demand_tests::{self, DEMAND, ready};
use super::{MachineView, Reason, ScalePlan, ScalePolicy, Strategy};
use crate::core::Millis;
use crate::core::demand::Forecast;
use crate::core::pipelines::{PipelineTracker, StagedJob};

/// The demand tests' forecast, with pipeline jobs.
fn forecast(peak: u32, pipeline_jobs: u32, backlog: u32) -> Forecast {
    Forecast {
        pipeline_jobs,
        ..demand_tests::forecast(peak, backlog)
    }
}

/// A machine running `running` jobs, idle since the start otherwise.
fn machine(id: &str, running: u32) -> MachineView {
    ready(id, running, 0)
}

/// A pass with no job waiting.
fn run(machines: &[MachineView], p: &ScalePolicy, f: Forecast, now: Millis) -> ScalePlan {
    demand_tests::run(machines, 0, p, f, now)
}

#[test]
fn the_next_stages_jobs_are_made_for_with_their_reason() {
    // One machine busy, one free.
    let fleet = [machine("a", 1), machine("b", 0)];
    let capped = ScalePolicy {
        max_machines: 4,
        ..DEMAND
    };
    // (policy, peak, pipeline jobs, backlog, machines created, reason)
    let cases = [
        (DEMAND, 0, 0, 0, 0, Reason::Steady),
        (DEMAND, 0, 1, 0, 0, Reason::Steady),
        (DEMAND, 0, 8, 0, 7, Reason::PipelineForecast),
        // The arrivals' forecast and the pipelines' are the same bursts: the larger is held,
        // and the step that asks for most of the shortfall gives the reason.
        (DEMAND, 4, 3, 0, 3, Reason::DemandForecast),
        (DEMAND, 4, 8, 0, 7, Reason::PipelineForecast),
        (DEMAND, 1, 8, 0, 7, Reason::PipelineForecast),
        (DEMAND, 0, 3, 5, 7, Reason::GitlabQueue),
        (DEMAND, 1, 0, 5, 5, Reason::GitlabQueue),
        (capped, 0, 8, 0, 2, Reason::PipelineForecast),
    ];
    for (i, (p, peak, jobs, backlog, create, reason)) in cases.into_iter().enumerate() {
        let plan = run(&fleet, &p, forecast(peak, jobs, backlog), 0);
        assert_eq!(
            (plan.create, plan.reason),
            (create, reason),
            "case {i}: {plan:?}"
        );
    }
    assert_eq!(Reason::PipelineForecast.code(), "pipeline_forecast");
}

#[test]
fn the_idle_strategy_ignores_pipelines() {
    let idle = ScalePolicy {
        strategy: Strategy::Idle,
        ..DEMAND
    };
    assert_eq!(run(&[], &idle, forecast(0, 8, 0), 0).create, 0);
}

#[test]
fn an_idle_machine_the_next_stage_needs_is_kept() {
    let fleet = [machine("a", 0), machine("b", 0)];
    let later = 10 * 60_000;
    assert_eq!(
        run(&fleet, &DEMAND, forecast(0, 0, 0), later).destroy.len(),
        2
    );
    assert_eq!(
        run(&fleet, &DEMAND, forecast(0, 1, 0), later).destroy.len(),
        1
    );
    assert!(
        run(&fleet, &DEMAND, forecast(0, 2, 0), later)
            .destroy
            .is_empty()
    );
}

/// A job of pipeline `pipeline` of the project "app".
fn app_job<'a>(pipeline: u64, stage: &'a str, name: &'a str) -> StagedJob<'a> {
    StagedJob {
        project: "app",
        pipeline,
        stage,
        name,
        class: None,
    }
}

/// The names of a stage of eight test jobs.
fn eight_tests() -> Vec<String> {
    (1..=8).map(|i| format!("test {i}/8")).collect()
}

/// The tracker and the planner together: a project's pipelines (a 5-minute build, then eight
/// tests) are learned; a new build's tests are made for a lead time before the build ends,
/// not earlier.
#[test]
fn a_learned_pipeline_makes_machines_one_lead_time_ahead() {
    let (minute, lead) = (60_000, 60_000);
    let mut t = PipelineTracker::default();
    let tests = eight_tests();
    let mut at = 0;
    for id in 1..=4 {
        t.job_started(app_job(id, "build", "compile"), at);
        if id == 4 {
            break;
        }
        at += 5 * minute;
        t.job_ended(app_job(id, "build", "compile"), at);
        for name in &tests {
            t.job_started(app_job(id, "test", name), at);
        }
        at += 10 * minute;
        for name in &tests {
            t.job_ended(app_job(id, "test", name), at);
        }
    }
    let building = [machine("builder", 1)];
    let plan_at = |now| {
        let f = Forecast {
            pipeline_jobs: t.forecast(now, lead).to_hold(),
            ..forecast(0, 0, 0)
        };
        run(&building, &DEMAND, f, now)
    };
    assert_eq!(plan_at(at + 4 * minute - 1).create, 0);
    // Eight test jobs come when the build ends; the builder's machine is free then and takes
    // one of them, so seven are made.
    let ahead = plan_at(at + 4 * minute);
    assert_eq!((ahead.create, ahead.reason), (7, Reason::PipelineForecast));
    let f = t.forecast(at + 4 * minute, lead);
    assert_eq!((f.jobs_due, f.freed, f.to_hold()), (8, 1, 7));
}

/// A stage's slots count for the stage after it: of the next stage's jobs due, those the
/// current stage's running jobs will free are not held, and each of its jobs that ends early
/// adds one held slot back (the one it freed, for the planner to keep).
#[test]
fn the_slots_a_stage_frees_are_held_for_the_next_stage() {
    let (minute, lead) = (60_000, 60_000);
    let mut t = PipelineTracker::default();
    let tests = eight_tests();
    let mut at = 0;
    for id in 1..=4 {
        for name in &tests {
            t.job_started(app_job(id, "test", name), at);
        }
        at += 10 * minute;
        if id == 4 {
            break;
        }
        for name in &tests {
            t.job_ended(app_job(id, "test", name), at);
        }
        t.job_started(app_job(id, "deploy", "staging"), at);
        t.job_started(app_job(id, "deploy", "production"), at);
        at += 2 * minute;
        t.job_ended(app_job(id, "deploy", "staging"), at);
        t.job_ended(app_job(id, "deploy", "production"), at);
    }
    // Pipeline 4's tests all run a minute before they are due to end: the two deploy jobs
    // will find eight free slots, so none is held.
    let due = at;
    let f = t.forecast(due - minute, lead);
    assert_eq!((f.jobs_due, f.freed, f.to_hold()), (2, 2, 0));
    // Seven ended early: the last test's slot frees as the deploys come, one more is held
    // (the freed machine the planner keeps, or one made).
    for name in &tests[..7] {
        t.job_ended(app_job(4, "test", name), due - 2 * minute);
    }
    let f = t.forecast(due - minute, lead);
    assert_eq!((f.jobs_due, f.freed, f.to_hold()), (2, 1, 1));
}

proptest! {
    /// Whatever the fleet and the forecast: never beyond `max_machines`, never a busy machine
    /// destroyed, and a pipeline forecast never makes fewer machines or destroys more than
    /// the same pass without it.
    #[test]
    fn a_pipeline_forecast_only_adds_within_the_maximum(
        running in proptest::collection::vec(0u32..3, 0..15), peak in 0u32..20,
        jobs in 0u32..40, backlog in 0u32..20, max_machines in 1u32..30, capacity in 1u32..4,
        now in 0u64..2_000_000,
    ) {
        let fleet: Vec<MachineView> = running.iter().enumerate()
            .map(|(i, &r)| machine(&format!("m{i}"), r.min(capacity)))
            .collect();
        let p = ScalePolicy { max_machines, capacity_per_machine: capacity, ..DEMAND };
        let with = run(&fleet, &p, forecast(peak, jobs, backlog), now);
        let without = run(&fleet, &p, forecast(peak, 0, backlog), now);
        let counted = fleet.len() as u32;
        prop_assert!(counted + with.create <= max_machines.max(counted));
        prop_assert!(with.create >= without.create);
        prop_assert!(with.destroy.len() <= without.destroy.len());
        for r in &with.destroy {
            let m = fleet.iter().find(|m| m.id == r.id).unwrap();
            prop_assert_eq!(m.running_jobs, 0);
        }
    }
}
