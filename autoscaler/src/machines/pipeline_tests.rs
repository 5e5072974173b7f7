//! The pipeline forecast in the service: learned from the job payloads' pipeline, stage and
//! name, acted on by the controller, and kept in the store across restarts.

use std::sync::Arc;
use std::time::Duration;

use super::controller_tests::{Rig, rig_launching};
use super::learning::PipelineLearning;
use crate::config::ScalingConfig;
use crate::core::JobId;
use crate::core::job::JobEvent;
use crate::core::pipelines::StagedJob;
use crate::decisions::Decisions;
use crate::metrics::Metrics;
use crate::store::MemoryStore;

const MINUTE: u64 = 60_000;

fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
/// Jobs of the second stage of every pipeline below.
const FAN_OUT: u64 = 8;

/// Takes job `id` of `stage` in `pipeline` from GitLab, as GitLab's payload says it (`placed`:
/// with `job_info.pipeline_id`, `stage` and `name`; else as a payload that says none).
fn take(r: &Rig, id: u64, pipeline: u64, stage: &str, placed: bool) -> JobId {
    let info = if placed {
        serde_json::json!({"project_id": 3, "pipeline_id": pipeline, "stage": stage, "name": format!("{stage} {id}")})
    } else {
        serde_json::json!({"project_id": 3})
    };
    let payload = serde_json::json!({"id": id, "token": format!("glcbt-{id}"), "job_info": info});
    r.jobs
        .accept("linux", &serde_json::to_vec(&payload).unwrap())
        .unwrap();
    JobId(id)
}

fn event(r: &Rig, id: JobId, event: JobEvent) {
    r.jobs.apply(id, event).unwrap();
}

/// Pipeline `n` starting now: one build job for five minutes, then eight tests for five.
fn run_pipeline(r: &Rig, n: u64, placed: bool) {
    let build = take(r, n * 100, n, "build", placed);
    event(r, build, JobEvent::Accepted);
    r.clock.advance(minutes(5));
    event(r, build, JobEvent::Ended);
    let tests: Vec<JobId> = (1..=FAN_OUT)
        .map(|i| take(r, n * 100 + i, n, "test", placed))
        .collect();
    for &t in &tests {
        event(r, t, JobEvent::Accepted);
    }
    r.clock.advance(minutes(5));
    for t in tests {
        event(r, t, JobEvent::Ended);
    }
}

/// Three pipelines of a project, 20 minutes apart, then a fourth whose build job started
/// four and a half minutes ago: the machines the controller makes, and the reason it gives.
async fn fourth_pipeline(placed: bool) -> (usize, String) {
    let r = rig_launching(ScalingConfig::default(), None, |_| None);
    let decisions = Decisions::new(Arc::new(Metrics::new()));
    r.controller.report_decisions_to(decisions.clone());
    for n in 1..=3 {
        run_pipeline(&r, n, placed);
        r.clock.advance(minutes(10));
    }
    let build = take(&r, 400, 4, "build", placed);
    event(&r, build, JobEvent::Accepted);
    r.clock.advance(minutes(4) + Duration::from_secs(30));
    r.controller.step().await;
    let (recent, _) = decisions.recent(Some("linux"));
    let reason = recent.last().map(|d| d.reason.clone()).unwrap_or_default();
    (r.provider.machines().len(), reason)
}

#[tokio::test]
async fn the_next_stage_gets_machines_before_its_jobs_are_pending() {
    let (made, reason) = fourth_pipeline(true).await;
    assert_eq!(
        (made, reason.as_str()),
        (FAN_OUT as usize - 1, "pipeline_forecast"),
        "the eight test jobs due within a boot: seven machines made ahead, the build's own \
         slot frees for the eighth as the build ends"
    );
}

#[tokio::test]
async fn without_pipeline_facts_the_stage_comes_unannounced() {
    let (made, reason) = fourth_pipeline(false).await;
    assert!(
        made < FAN_OUT as usize && reason != "pipeline_forecast",
        "payloads that say no stage forecast no stage: {made} machines, {reason}"
    );
}

/// The machines made for a fourth pipeline whose build ends a minute in: as failed (its final
/// state said so, or GitLab canceled it), or as passed.
async fn fourth_build_ends_early(failed: bool) -> usize {
    let r = rig_launching(ScalingConfig::default(), None, |_| None);
    for n in 1..=3 {
        run_pipeline(&r, n, true);
        r.clock.advance(minutes(10));
    }
    let build = take(&r, 400, 4, "build", true);
    event(&r, build, JobEvent::Accepted);
    r.clock.advance(minutes(1));
    if failed {
        r.jobs.ends_failed(build).unwrap();
    }
    event(&r, build, JobEvent::Ended);
    r.clock.advance(Duration::from_secs(1));
    r.controller.step().await;
    r.provider.machines().len()
}

#[tokio::test]
async fn a_failed_build_gets_no_machines_for_the_tests_gitlab_skips() {
    let (failed, passed) = (
        fourth_build_ends_early(true).await,
        fourth_build_ends_early(false).await,
    );
    assert!(
        passed >= failed + FAN_OUT as usize,
        "a passed build releases its eight tests ({passed} machines); a failed one none \
         ({failed} machines)"
    );
}

#[test]
fn what_was_learned_survives_a_restart() {
    let store = MemoryStore::new();
    let mut learned = PipelineLearning::load(&store, "linux");
    let job = |pipeline, stage| StagedJob {
        project: "3",
        pipeline,
        stage,
        name: stage,
        class: None,
    };
    for pipeline in 1..=3 {
        let at = pipeline * 30 * MINUTE;
        learned.job_started(job(pipeline, "build"), at);
        learned.job_ended(job(pipeline, "build"), at + 5 * MINUTE);
        learned.job_started(job(pipeline, "test"), at + 5 * MINUTE);
        learned.job_ended(job(pipeline, "test"), at + 10 * MINUTE);
    }
    learned.job_started(job(4, "build"), 120 * MINUTE);
    let ahead = |l: &PipelineLearning| l.tracker.forecast(124 * MINUTE, 2 * MINUTE);
    assert_eq!(ahead(&learned).jobs_due, 1);
    learned.save(&store, "linux", 124 * MINUTE, true);
    assert_eq!(
        ahead(&PipelineLearning::load(&store, "linux")),
        ahead(&learned),
        "the shape and the pipeline in flight come back from the store"
    );
    assert_eq!(
        PipelineLearning::load(&store, "other").tracker.projects(),
        0,
        "each pool keeps its own"
    );
}
