//! A pool with classes: each class holds for the next-stage jobs that route to it, counts the
//! slots a stage frees only where the whole stage ran in it, and holds a scheduled run in the
//! default class.

use super::*;

#[test]
fn each_class_holds_for_the_next_stage_jobs_that_route_to_it() {
    // Six test jobs route to `small` and two to `large` (say, the integration tests).
    let mut t = PipelineTracker::default();
    let mut at = 0;
    for id in 1..=3 {
        let build = StagedJob {
            class: Some("small"),
            ..job("app", id, "build", "compile")
        };
        t.job_started(build, at);
        at += 5 * MINUTE;
        t.job_ended(build, at);
        for n in 0..8 {
            let name = format!("test {n}");
            let class = if n < 6 { "small" } else { "large" };
            let test = StagedJob {
                class: Some(class),
                ..job("app", id, "test", &name)
            };
            t.job_started(test, at);
            t.job_ended(test, at + MINUTE);
        }
        at += MINUTE;
    }
    t.job_started(
        StagedJob {
            class: Some("small"),
            ..job("app", 4, "build", "compile")
        },
        at,
    );
    let due = |scope| {
        let f = t.forecast_for(at + 5 * MINUTE, Horizon::lead(LEAD), scope);
        (f.jobs_due, f.freed)
    };
    let class = |name, is_default| ClassScope::Class { name, is_default };
    // The build's machine, a small one, is free when the tests become pending.
    assert_eq!(due(class("small", true)), (6, 1));
    assert_eq!(due(class("large", false)), (2, 0));
    assert_eq!(due(class("gpu", false)), (0, 0));
    assert_eq!(due(ClassScope::All), (8, 1));
}

/// Running jobs are not told apart by class, so a stage that ran in two classes frees no slot
/// in either: each class holds all of its next-stage jobs (never fewer than it needs).
#[test]
fn a_stage_split_between_classes_frees_no_slot_of_a_class() {
    let mut t = PipelineTracker::default();
    let build = |id, n: u32| StagedJob {
        class: Some(if n == 0 { "small" } else { "large" }),
        ..job("app", id, "build", if n == 0 { "compile" } else { "image" })
    };
    let mut at = 0;
    for id in 1..=4 {
        for n in 0..2 {
            t.job_started(build(id, n), at);
        }
        if id == 4 {
            break;
        }
        at += 5 * MINUTE;
        for n in 0..2 {
            t.job_ended(build(id, n), at);
        }
        for n in 0..4 {
            let name = format!("test {n}");
            let test = StagedJob {
                class: Some("small"),
                ..job("app", id, "test", &name)
            };
            t.job_started(test, at);
            t.job_ended(test, at + MINUTE);
        }
        at += MINUTE;
    }
    let due = |scope| {
        let f = t.forecast_for(at + 5 * MINUTE, Horizon::lead(LEAD), scope);
        (f.jobs_due, f.freed)
    };
    let class = |name, is_default| ClassScope::Class { name, is_default };
    assert_eq!(due(class("small", true)), (4, 0));
    assert_eq!(due(class("large", false)), (0, 0));
    assert_eq!(due(ClassScope::All), (4, 2));
}

#[test]
fn a_stage_learned_without_classes_is_held_in_the_default_class() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    let due = |scope| {
        let f = t.forecast_for(start + 5 * MINUTE, Horizon::lead(LEAD), scope);
        (f.jobs_due, f.freed)
    };
    let class = |name, is_default| ClassScope::Class { name, is_default };
    assert_eq!(due(class("small", true)), (8, 1));
    assert_eq!(due(class("large", false)), (0, 0));
}

#[test]
fn a_scheduled_run_is_held_for_in_the_default_class_until_its_pipeline_comes() {
    let mut t = PipelineTracker::default();
    let at = 120 * MINUTE;
    t.schedules_listed("data", vec![at, at], 0);
    let horizon = Horizon::lead(LEAD);
    let held = |t: &PipelineTracker, now, scope| t.forecast_for(now, horizon, scope).jobs_due;
    assert_eq!(held(&t, at - LEAD - 1, ClassScope::All), 0, "not yet");
    assert_eq!(held(&t, at - LEAD, ClassScope::All), 2);
    let default = ClassScope::Class {
        name: "small",
        is_default: true,
    };
    let large = ClassScope::Class {
        name: "large",
        is_default: false,
    };
    assert_eq!(held(&t, at, default), 2);
    assert_eq!(held(&t, at, large), 0, "no class is known of a run to come");
    // The first scheduled pipeline's first job was held for; its second job was not.
    assert!(t.scheduled_job_arrived("data", 7, at + 1_000));
    assert!(!t.scheduled_job_arrived("data", 7, at + 1_000));
    assert_eq!(held(&t, at + 1_000, ClassScope::All), 1);
    assert!(
        !t.scheduled_job_arrived("web", 8, at),
        "a project without schedules"
    );
}
