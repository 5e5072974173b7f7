//! Learning pipeline shapes from the jobs seen, adapting when they change, forecasting the next
//! stage of pipelines in flight, and staying within the memory bound.

use super::*;

const MINUTE: Millis = 60_000;
const LEAD: Millis = 90_000;

/// A stage: its name, its jobs, how long each runs.
type Stage<'a> = (&'a str, u32, Millis);

const FANOUT: [Stage<'static>; 3] = [
    ("build", 1, 5 * MINUTE),
    ("test", 8, 10 * MINUTE),
    ("deploy", 2, 2 * MINUTE),
];

fn job<'a>(project: &'a str, pipeline: u64, stage: &'a str, name: &'a str) -> StagedJob<'a> {
    StagedJob {
        project,
        pipeline,
        stage,
        name,
        class: None,
    }
}

/// Starts every job of `stage` at `at`: returns their names.
fn start_stage(t: &mut PipelineTracker, project: &str, id: u64, stage: Stage<'_>, at: Millis) {
    for n in 0..stage.1 {
        t.job_started(job(project, id, stage.0, &format!("{} {n}", stage.0)), at);
    }
}

fn end_stage(t: &mut PipelineTracker, project: &str, id: u64, stage: Stage<'_>, at: Millis) {
    for n in 0..stage.1 {
        t.job_ended(job(project, id, stage.0, &format!("{} {n}", stage.0)), at);
    }
}

/// Runs a whole pipeline of `stages` from `at`, each stage pending when the one before ended
/// and started at once; returns when it ended.
fn run_pipeline(
    t: &mut PipelineTracker,
    project: &str,
    id: u64,
    stages: &[Stage<'_>],
    mut at: Millis,
) -> Millis {
    for &stage in stages {
        start_stage(t, project, id, stage, at);
        at += stage.2;
        end_stage(t, project, id, stage, at);
    }
    at
}

/// Three pipelines of `stages`, one after the other from 0; returns when the last ended.
fn learn(t: &mut PipelineTracker, project: &str, stages: &[Stage<'_>]) -> Millis {
    (1..=3).fold(0, |at, id| run_pipeline(t, project, id, stages, at))
}

/// Between a stage's end and its next stage's jobs reaching the pool (GitLab's pipeline
/// processing, then the intake's requests) those jobs are held as released, one fewer for each
/// that arrives; a next stage that does not come is held one lead time at most.
#[test]
fn a_released_stage_is_held_until_its_jobs_arrive() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT) + MINUTE;
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    let end = start + 5 * MINUTE;
    assert_eq!(
        t.forecast(end - 1, LEAD).released,
        0,
        "the build still runs"
    );
    end_stage(&mut t, "app", 4, FANOUT[0], end);
    let f = t.forecast(end + 200, LEAD);
    assert_eq!((f.released, f.jobs_due), (8, 0));
    for n in 0..3 {
        t.job_arrived(job("app", 4, "test", &format!("test {n}")), end + 300);
    }
    assert_eq!(t.forecast(end + 400, LEAD).released, 5);
    // The same job again (a request retried) is one job.
    t.job_arrived(job("app", 4, "test", "test 0"), end + 450);
    assert_eq!(t.forecast(end + 500, LEAD).released, 5);
    // The stage's first job starts (on the build's machine, its sidecar asking at once)
    // before the other five arrive: they are still on their way, and still held.
    t.job_started(job("app", 4, "test", "test 0"), end + 600);
    let f = t.forecast(end + 700, LEAD);
    assert_eq!((f.released, f.jobs_due), (5, 0));
    for n in 3..7 {
        t.job_arrived(job("app", 4, "test", &format!("test {n}")), end + 800);
    }
    assert_eq!(t.forecast(end + 900, LEAD).released, 1);
    // The eighth never comes (say, a rule left it out this time): held a lead time at most.
    assert_eq!(t.forecast(end + 600 + LEAD, LEAD).released, 1);
    assert_eq!(t.forecast(end + 601 + LEAD, LEAD).released, 0);

    // Pipeline 5's build fails: the tests never come, and are held one lead time at most.
    start_stage(&mut t, "app", 5, FANOUT[0], end);
    end_stage(&mut t, "app", 5, FANOUT[0], end + 5 * MINUTE);
    assert_eq!(t.forecast(end + 5 * MINUTE + LEAD, LEAD).released, 8);
    assert_eq!(t.forecast(end + 5 * MINUTE + LEAD + 1, LEAD).released, 0);
}

#[test]
fn the_next_stage_is_forecast_a_lead_time_before_it_is_due() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT) + MINUTE;
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    // The build runs 5 minutes: its eight test jobs are not counted before 5 min - lead time.
    assert_eq!(t.forecast(start + MINUTE, LEAD).jobs_due, 0);
    let due = start + 5 * MINUTE;
    assert_eq!(t.forecast(due - LEAD - 1, LEAD).jobs_due, 0);
    let f = t.forecast(due - LEAD, LEAD);
    assert_eq!((f.jobs_due, f.pipelines), (8, 1));
    // A wait allowed (the target) counts them that much later.
    let horizon = Horizon {
        late: LEAD * 2 / 3,
        ..Horizon::lead(LEAD)
    };
    let later = |at| t.forecast_for(at, horizon, ClassScope::All).jobs_due;
    assert_eq!((later(due - LEAD), later(due - LEAD / 3)), (0, 8));
    assert_eq!(later(due - LEAD / 3 - 1), 0);
    // Once the build has ended the tests are pending: the planner counts them as waiting.
    end_stage(&mut t, "app", 4, FANOUT[0], due);
    assert_eq!(t.forecast(due, LEAD).jobs_due, 0);
    // The test stage runs: the two deploy jobs come 10 minutes after it started.
    start_stage(&mut t, "app", 4, FANOUT[1], due);
    assert_eq!(t.forecast(due + 10 * MINUTE - LEAD, LEAD).jobs_due, 2);
    // The last stage has nothing after it.
    end_stage(&mut t, "app", 4, FANOUT[1], due + 10 * MINUTE);
    start_stage(&mut t, "app", 4, FANOUT[2], due + 10 * MINUTE);
    assert_eq!(t.forecast(due + 11 * MINUTE, LEAD).jobs_due, 0);
}

/// The build ran 5, 4, 6, 7 and 8 minutes in five pipelines, and machines take 1 to 2 minutes:
/// the tests' machines are asked for at the latest moment that leaves at most one pair of a
/// duration and a boot in twenty with its jobs waiting past the target, and a boot's spread
/// is not added to a duration's.
#[test]
fn the_next_stage_is_timed_from_its_durations_and_the_boots_together() {
    let mut t = PipelineTracker::default();
    let mut at = 0;
    for (id, minutes) in (1..).zip([5, 4, 6, 7, 8]) {
        let stages = [("build", 1, minutes * MINUTE), FANOUT[1], FANOUT[2]];
        at = run_pipeline(&mut t, "app", id, &stages, at);
    }
    let start = at + MINUTE;
    start_stage(&mut t, "app", 6, FANOUT[0], start);
    let boots = BootTimes::new([MINUTE, MINUTE + MINUTE / 2, 2 * MINUTE, MINUTE], 0);
    let held_at = |late, now| {
        let horizon = Horizon {
            late,
            boots,
            ..Horizon::lead(LEAD)
        };
        t.forecast_for(now, horizon, ClassScope::All).jobs_due
    };
    // Twenty pairs: one (4 min less 2 min) leaves 2 min; the next lowest, 2.5 min.
    let ask = start + 2 * MINUTE + MINUTE / 2;
    assert_eq!((held_at(0, ask - 1), held_at(0, ask)), (0, 8));
    // A wait of 20 s allowed: asked 20 s later.
    assert_eq!(held_at(20_000, ask + 19_999), 0);
    assert_eq!(held_at(20_000, ask + 20_000), 8);
}

#[test]
fn unknown_projects_and_stages_forecast_nothing() {
    let mut t = PipelineTracker::default();
    learn(&mut t, "app", &FANOUT);
    start_stage(&mut t, "other", 9, FANOUT[0], 100 * MINUTE);
    start_stage(&mut t, "app", 10, ("lint", 1, MINUTE), 100 * MINUTE);
    assert_eq!(t.forecast(105 * MINUTE, LEAD), PipelineForecast::default());
}

#[test]
fn pipelines_in_flight_add_up() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    for (id, offset) in [(10, 0), (11, 30_000), (12, 4 * MINUTE)] {
        start_stage(&mut t, "app", id, FANOUT[0], start + offset);
    }
    // Two builds end within the lead time of 4 min; the third only at 9 min.
    let f = t.forecast(start + 4 * MINUTE, LEAD);
    assert_eq!((f.jobs_due, f.pipelines), (16, 2));
}

#[test]
fn the_recent_pipelines_say_from_when_and_until_when() {
    let mut t = PipelineTracker::default();
    let mut at = 0;
    for (id, build) in [(1, 2), (2, 4), (3, 5), (4, 6)] {
        let stages = [("build", 1, build * MINUTE), FANOUT[1]];
        at = run_pipeline(&mut t, "app", id, &stages, at);
    }
    // The builds took 2, 4, 5 and 6 minutes: with four runs, none of them may leave the tests
    // waiting, so their machines are asked for a lead time before the earliest, 2 minutes...
    start_stage(&mut t, "app", 5, FANOUT[0], at);
    assert_eq!(t.forecast(at + 2 * MINUTE - LEAD - 1, LEAD).jobs_due, 0);
    assert_eq!(t.forecast(at + 2 * MINUTE - LEAD, LEAD).jobs_due, 8);
    // ...until the build has run twice the usual 5 minutes (the median of the last three: one
    // odd run does not move it).
    assert_eq!(t.forecast(at + 10 * MINUTE, LEAD).jobs_due, 8);
    assert_eq!(t.forecast(at + 10 * MINUTE + 1, LEAD).jobs_due, 0);
}

#[test]
fn the_next_stages_jobs_are_foreseen_and_no_others() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    let test = |pipeline| job("app", pipeline, "test", "test 0");
    assert!(t.foresees(test(4)));
    // Another job of the stage, once the stage has started, too.
    end_stage(&mut t, "app", 4, FANOUT[0], start + 5 * MINUTE);
    start_stage(&mut t, "app", 4, ("test", 1, MINUTE), start + 5 * MINUTE);
    assert!(t.foresees(job("app", 4, "test", "test 7")));
    // Not a pipeline's first job, not a stage that does not follow, not an unknown project.
    assert!(!t.foresees(job("app", 5, "build", "build 0")));
    assert!(!t.foresees(job("app", 4, "lint", "rubocop")));
    assert!(!t.foresees(job("web", 4, "test", "test 0")));
}

#[test]
fn a_job_removed_is_learned_in_two_pipelines() {
    let mut t = PipelineTracker::default();
    let mut at = learn(&mut t, "app", &FANOUT);
    let seven = [FANOUT[0], ("test", 7, 10 * MINUTE), FANOUT[2]];
    let mut forecast_after = Vec::new();
    for id in 4..=5 {
        at = run_pipeline(&mut t, "app", id, &seven, at);
        start_stage(&mut t, "app", 100 + id, FANOUT[0], at);
        forecast_after.push(t.forecast(at + 4 * MINUTE, LEAD).jobs_due);
        end_stage(&mut t, "app", 100 + id, FANOUT[0], at + 5 * MINUTE);
    }
    // One pipeline with seven is an exception; two are the new shape.
    assert_eq!(forecast_after, [8, 7]);
}

#[test]
fn a_new_stage_is_learned_in_one_pipeline() {
    let mut t = PipelineTracker::default();
    let mut at = learn(&mut t, "app", &FANOUT);
    let linted = [FANOUT[0], ("lint", 1, MINUTE), FANOUT[1], FANOUT[2]];
    at = run_pipeline(&mut t, "app", 4, &linted, at);
    start_stage(&mut t, "app", 5, FANOUT[0], at);
    // The build is now followed by one lint job, not by the tests.
    assert_eq!(t.forecast(at + 4 * MINUTE, LEAD).jobs_due, 1);
    end_stage(&mut t, "app", 5, FANOUT[0], at + 5 * MINUTE);
    start_stage(&mut t, "app", 5, ("lint", 1, MINUTE), at + 5 * MINUTE);
    // Lint ran once, for a minute, before the eight tests.
    assert_eq!(t.forecast(at + 5 * MINUTE, LEAD).jobs_due, 8);
}

#[test]
fn a_retried_job_counts_once() {
    let mut t = PipelineTracker::default();
    let mut at = 0;
    for id in 1..=3 {
        start_stage(&mut t, "app", id, FANOUT[0], at);
        end_stage(&mut t, "app", id, FANOUT[0], at + 5 * MINUTE);
        at += 5 * MINUTE;
        t.job_started(job("app", id, "test", "rspec"), at);
        t.job_ended(job("app", id, "test", "rspec"), at + MINUTE);
        t.job_started(job("app", id, "test", "rspec"), at + MINUTE);
        t.job_ended(job("app", id, "test", "rspec"), at + 2 * MINUTE);
        at += 2 * MINUTE;
    }
    start_stage(&mut t, "app", 4, FANOUT[0], at);
    assert_eq!(t.forecast(at + 4 * MINUTE, LEAD).jobs_due, 1);
}

#[test]
fn a_stage_twice_its_usual_length_is_no_longer_forecast() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    // Overdue, the tests are still expected (they come when the build ends)...
    assert_eq!(t.forecast(start + 9 * MINUTE, LEAD).jobs_due, 8);
    // ...until the build has run twice its usual 5 minutes.
    assert_eq!(t.forecast(start + 10 * MINUTE + 1, LEAD).jobs_due, 0);
}

#[test]
fn a_stage_that_waits_for_nothing_teaches_no_duration() {
    let mut t = PipelineTracker::default();
    for id in 1..=3 {
        // `needs: []`: the second stage starts with the first, before any job ended.
        start_stage(&mut t, "app", id, FANOUT[0], 0);
        start_stage(&mut t, "app", id, FANOUT[1], 0);
    }
    start_stage(&mut t, "app", 4, FANOUT[0], 0);
    assert_eq!(t.forecast(0, LEAD).jobs_due, 0);
}

#[test]
fn memory_is_bounded_and_the_least_recently_seen_go() {
    let mut t = PipelineTracker::default();
    learn(&mut t, "dropped", &FANOUT);
    let later = learn(&mut t, "kept", &FANOUT);
    let n = MAX_PROJECTS as u64 + 10;
    for p in 0..n {
        // "kept" is seen again now and then, "dropped" never.
        if p % 100 == 0 {
            start_stage(&mut t, "kept", 1_000 + p, FANOUT[2], later + p);
        }
        start_stage(&mut t, &format!("p{p}"), 1, FANOUT[0], later + p);
    }
    assert_eq!(t.projects(), MAX_PROJECTS);
    assert!(t.projects.contains_key("kept"));
    assert!(!t.projects.contains_key("dropped"));
    // Pipelines in flight per project are bounded too: those never ended count at most so many.
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    for id in 0..MAX_RUNS as u64 * 2 {
        start_stage(&mut t, "app", 100 + id, FANOUT[0], start + id);
    }
    let f = t.forecast(start + 4 * MINUTE, LEAD);
    assert_eq!(f.pipelines as usize, MAX_RUNS);
    // And so are the names remembered per stage, whatever the pipeline throws at it.
    t.job_started(job("app", 999, "huge", "x"), start);
    for n in 0..MAX_JOBS_PER_STAGE * 2 {
        t.job_started(job("app", 999, "huge", &format!("job {n}")), start);
    }
    let run = t.projects["app"]
        .runs()
        .find(|r| r.pipeline == 999)
        .unwrap();
    assert_eq!(run.current_stage().unwrap().jobs.len(), MAX_JOBS_PER_STAGE);
    // The arrivals remembered hold the current stage's and the next one's, at most.
    for n in 0..MAX_JOBS_PER_STAGE * 3 {
        t.job_arrived(job("app", 999, "huge", &format!("job {n}")), start);
        t.job_arrived(job("app", 999, "after", &format!("job {n}")), start);
    }
    let run = t.projects["app"]
        .runs()
        .find(|r| r.pipeline == 999)
        .unwrap();
    assert_eq!(run.arrived.len(), MAX_JOBS_PER_STAGE * 2);
}

#[test]
fn what_gitlab_announces_replaces_the_learned_count() {
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    // This pipeline's rules added three test jobs, and a stage the shape never saw.
    let announced = vec![("test".to_string(), 11), ("deploy".to_string(), 2)];
    t.announce("app", 4, announced, start);
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    assert_eq!(t.forecast(start + 5 * MINUTE - LEAD, LEAD).jobs_due, 11);
    assert!(t.foresees(job("app", 4, "test", "test 10")));
    // The next stage after the tests is the deploy GitLab announced.
    end_stage(&mut t, "app", 4, FANOUT[0], start + 5 * MINUTE);
    start_stage(&mut t, "app", 4, FANOUT[1], start + 5 * MINUTE);
    assert_eq!(t.forecast(start + 15 * MINUTE - LEAD, LEAD).jobs_due, 2);
}

#[test]
fn a_pipeline_gitlab_announces_nothing_for_holds_nothing() {
    // A pipeline of one stage this time (say, a scheduled lint): the shape's eight test jobs
    // never come.
    let mut t = PipelineTracker::default();
    let start = learn(&mut t, "app", &FANOUT);
    t.announce("app", 4, Vec::new(), start);
    start_stage(&mut t, "app", 4, FANOUT[0], start);
    assert_eq!(t.forecast(start + 5 * MINUTE - LEAD, LEAD).jobs_due, 0);
}

mod classes;
