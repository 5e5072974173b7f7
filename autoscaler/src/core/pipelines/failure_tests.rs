//! A failed job stops its pipeline's forecast, as GitLab skips the stages after it; a retry
//! of the job, or a later stage coming all the same (`allow_failure`), brings it back.

use super::*;

const MINUTE: Millis = 60_000;
const LEAD: Millis = 90_000;
const BUILD: Millis = 5 * MINUTE;

fn job<'a>(pipeline: u64, stage: &'a str, name: &'a str) -> StagedJob<'a> {
    StagedJob {
        project: "app",
        pipeline,
        stage,
        name,
        class: None,
    }
}

fn tests(pipeline: u64) -> Vec<(u64, String)> {
    (0..8).map(|n| (pipeline, format!("rspec {n}/8"))).collect()
}

/// Pipeline `id` from `at`: a 5-minute build, then eight 10-minute tests; returns its end.
fn run(t: &mut PipelineTracker, id: u64, at: Millis) -> Millis {
    t.job_started(job(id, "build", "compile"), at);
    t.job_ended(job(id, "build", "compile"), at + BUILD);
    for (p, name) in tests(id) {
        t.job_started(job(p, "test", &name), at + BUILD);
    }
    for (p, name) in tests(id) {
        t.job_ended(job(p, "test", &name), at + BUILD + 10 * MINUTE);
    }
    at + BUILD + 10 * MINUTE
}

/// Three pipelines learned, a fourth's build started at the returned time.
fn fourth_build_running(t: &mut PipelineTracker) -> Millis {
    let start = (1..=3).fold(0, |at, id| run(t, id, at)) + MINUTE;
    t.job_started(job(4, "build", "compile"), start);
    start
}

/// The next stage's jobs the forecast counts due just before the build's usual end.
fn due(t: &PipelineTracker, start: Millis) -> u32 {
    t.forecast(start + BUILD - 1_000, LEAD).jobs_due
}

#[test]
fn a_failed_build_stops_the_forecast_of_its_tests() {
    let mut t = PipelineTracker::default();
    let start = fourth_build_running(&mut t);
    assert_eq!(due(&t, start), 8, "a running build foretells its tests");
    let mut failed = t.clone();
    failed.job_failed(job(4, "build", "compile"), start + 2 * MINUTE);
    let f = failed.forecast(start + 2 * MINUTE + 1_000, LEAD);
    assert_eq!(
        (f.jobs_due, f.released),
        (0, 0),
        "GitLab skips the tests of a failed build"
    );
    // A build that passes releases them as before.
    t.job_ended(job(4, "build", "compile"), start + 2 * MINUTE);
    assert_eq!(t.forecast(start + 2 * MINUTE + 1_000, LEAD).released, 8);
}

#[test]
fn a_retry_of_the_failed_job_brings_the_forecast_back() {
    let mut t = PipelineTracker::default();
    let start = fourth_build_running(&mut t);
    t.job_failed(job(4, "build", "compile"), start + MINUTE);
    // GitLab retries it (`retry:`): the same job of the same stage comes again.
    t.job_arrived(job(4, "build", "compile"), start + MINUTE + 5_000);
    t.job_started(job(4, "build", "compile"), start + MINUTE + 5_000);
    assert_eq!(due(&t, start + MINUTE + 5_000), 8);
}

#[test]
fn a_job_whose_failure_did_not_stop_its_pipeline_is_learned_as_allowed_to_fail() {
    let mut t = PipelineTracker::default();
    let start = fourth_build_running(&mut t);
    // `allow_failure: true`: the build fails and the tests come all the same.
    t.job_failed(job(4, "build", "compile"), start + BUILD);
    for (p, name) in tests(4) {
        t.job_arrived(job(p, "test", &name), start + BUILD + 2_000);
        t.job_started(job(p, "test", &name), start + BUILD + 2_000);
    }
    for (p, name) in tests(4) {
        t.job_ended(job(p, "test", &name), start + BUILD + 10 * MINUTE);
    }
    // The next pipeline's build fails too: its tests are held for as released.
    let next = start + BUILD + 11 * MINUTE;
    t.job_started(job(5, "build", "compile"), next);
    t.job_failed(job(5, "build", "compile"), next + MINUTE);
    assert_eq!(t.forecast(next + MINUTE + 1_000, LEAD).released, 8);
    // Another job of the failed job's stage on its way changes nothing: a build that may not
    // fail stops the forecast whatever else of its stage still comes.
    let mut other = PipelineTracker::default();
    let start = fourth_build_running(&mut other);
    other.job_failed(job(4, "build", "compile"), start + MINUTE);
    other.job_arrived(job(4, "build", "lint"), start + MINUTE + 1_000);
    let f = other.forecast(start + MINUTE + 2_000, LEAD);
    assert_eq!((f.jobs_due, f.released), (0, 0));
}
