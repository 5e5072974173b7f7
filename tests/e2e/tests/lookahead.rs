//! The pipeline look-ahead's calls against the fake GitLab's pipelines, as GitLab answers them:
//! the stages still to come of a pipeline (its `created` jobs), which shrink as the pipeline
//! runs; the token's scopes; a project's active pipeline schedules; and the refusals a wrong
//! token or project gets.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use autoscaler::clock::SystemClock;
use autoscaler::lookahead::{
    Announcement, ApiClient, ApiError, LookAhead, ScheduleListing, reads_the_api, stages_to_come,
};
use autoscaler::secret::Secret;
use e2e::stack::FakeGitLab;
use fake_gitlab::control::{FaultAction, FaultRule, JobSpec, ScheduleSpec};
use serde_json::json;

const PROJECT: u64 = 42;
const READER: &str = "glpat-reader";
const TIMEOUT: Duration = Duration::from_secs(10);

fn client(gitlab: &FakeGitLab, token: &str) -> Result<ApiClient> {
    Ok(ApiClient::new(
        &gitlab.url.parse()?,
        Secret::new(token),
        TIMEOUT,
    )?)
}

/// A pipeline of a build, four tests and two deploys for the runner `token`; its id and build
/// job's id.
async fn pipeline(gitlab: &FakeGitLab, token: &str) -> Result<(u64, u64)> {
    let job = |stage: &str, name: String| {
        let mut spec = JobSpec::new(token, &["true"]);
        spec.stage = stage.into();
        spec.name = name;
        spec.project_id = PROJECT;
        spec
    };
    let stages = vec![
        vec![job("build", "compile".into())],
        (1..=4)
            .map(|i| job("test", format!("unit {i}/4")))
            .collect(),
        vec![
            job("deploy", "package".into()),
            job("deploy", "publish".into()),
        ],
    ];
    let created = gitlab.control.create_pipeline(stages).await?;
    Ok((created.id, created.stages[0][0].id))
}

/// Takes the build job as a runner would and reports it passed.
async fn pass_build(gitlab: &FakeGitLab, token: &str, build: u64) -> Result<()> {
    let http = reqwest::Client::new();
    let taken: serde_json::Value = http
        .post(format!("{}/api/v4/jobs/request", gitlab.url))
        .json(&json!({"token": token, "info": {"features": {}}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    ensure!(
        taken["id"] == json!(build),
        "the build was handed out: {taken}"
    );
    let job_token = taken["token"].as_str().unwrap_or_default();
    http.put(format!("{}/api/v4/jobs/{build}", gitlab.url))
        .json(&json!({"token": job_token, "state": "success", "exit_code": 0}))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

#[tokio::test]
async fn the_stages_to_come_shrink_as_the_pipeline_runs() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    let runner = "glrt-lookahead-runner";
    gitlab.add_runner(runner).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    let api = client(&gitlab, READER)?;
    ensure!(reads_the_api(&api.token_scopes(0).await?));

    let (id, build) = pipeline(&gitlab, runner).await?;
    let to_come = stages_to_come(&api.created_jobs(PROJECT, id, 0).await?);
    let expected = vec![("test".to_string(), 4), ("deploy".to_string(), 2)];
    ensure!(to_come == expected, "while the build waits: {to_come:?}");

    pass_build(&gitlab, runner, build).await?;
    let to_come = stages_to_come(&api.created_jobs(PROJECT, id, 0).await?);
    ensure!(
        to_come == vec![("deploy".to_string(), 2)],
        "once the tests are pending: {to_come:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_wrong_token_scope_or_project_is_refused_as_gitlab_refuses_it() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    let runner = "glrt-lookahead-refusals";
    gitlab.add_runner(runner).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    gitlab
        .control
        .add_api_token("glpat-registry", &["read_registry"])
        .await?;
    let (id, _) = pipeline(&gitlab, runner).await?;

    let unknown = client(&gitlab, "glpat-unknown")?.token_scopes(0).await;
    ensure!(
        matches!(&unknown, Err(ApiError::Refused { status, .. }) if status.as_u16() == 401),
        "{unknown:?}"
    );
    let narrow = client(&gitlab, "glpat-registry")?;
    ensure!(!reads_the_api(&narrow.token_scopes(0).await?));
    let denied = narrow.created_jobs(PROJECT, id, 0).await;
    ensure!(
        matches!(&denied, Err(ApiError::Refused { status, .. }) if status.as_u16() == 403),
        "{denied:?}"
    );
    let elsewhere = client(&gitlab, READER)?
        .created_jobs(PROJECT + 1, id, 0)
        .await;
    ensure!(
        matches!(elsewhere, Err(ApiError::NotFound { .. })),
        "{elsewhere:?}"
    );
    Ok(())
}

/// Takes `pool`'s answers until one about `pipeline` came (or `TIMEOUT` passed).
async fn answers_until(lookahead: &LookAhead, pool: &str, pipeline: u64) -> Vec<Announcement> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut answers: Vec<Announcement> = Vec::new();
    while answers.last().is_none_or(|a| a.pipeline != pipeline)
        && tokio::time::Instant::now() < deadline
    {
        let taken = lookahead.take_answers(pool);
        if taken.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        answers.extend(taken);
    }
    answers
}

#[tokio::test]
async fn rate_limits_and_outages_are_waited_out() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    let runner = "glrt-lookahead-faults";
    gitlab.add_runner(runner).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    let (id, _) = pipeline(&gitlab, runner).await?;
    let on_pipelines = |action, count| FaultRule {
        path_prefix: Some(format!("/api/v4/projects/{PROJECT}/pipelines")),
        count: Some(count),
        ..FaultRule::new(action)
    };
    let limited = FaultAction::Status {
        status: 429,
        retry_after: Some(1),
    };
    let down = FaultAction::Status {
        status: 503,
        retry_after: None,
    };
    gitlab.control.add_fault(&on_pipelines(limited, 1)).await?;
    gitlab.control.add_fault(&on_pipelines(down, 1)).await?;

    let url = gitlab.url.parse()?;
    let lookahead = LookAhead::new(&url, Secret::new(READER), Arc::new(SystemClock))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(lookahead.clone().run(stop.clone()));
    lookahead.ask("linux", PROJECT, id);
    let answers = answers_until(&lookahead, "linux", id).await;
    stop.cancel();
    worker.await?;
    ensure!(
        answers.len() == 1,
        "answered after a 429 and a 503: {answers:?}"
    );
    let stats = gitlab.control.stats().await?;
    ensure!(
        stats.faults_injected == 2,
        "both faults were met: {stats:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_token_without_read_api_turns_the_look_ahead_off() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    gitlab
        .control
        .add_api_token("glpat-registry", &["read_registry"])
        .await?;
    let url = gitlab.url.parse()?;
    let lookahead = LookAhead::new(&url, Secret::new("glpat-registry"), Arc::new(SystemClock))?;
    // The worker checks the token and ends: nothing is ever asked of GitLab's pipelines.
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::time::timeout(TIMEOUT, lookahead.clone().run(stop)).await?;
    lookahead.ask("linux", PROJECT, 1);
    let stats = gitlab.control.stats().await?;
    ensure!(
        stats
            .requests
            .keys()
            .all(|route| !route.contains("pipelines")),
        "no pipeline was asked about: {stats:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_look_ahead_answers_each_pool_off_its_path() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    let runner = "glrt-lookahead-service";
    gitlab.add_runner(runner).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    let (first, _) = pipeline(&gitlab, runner).await?;
    let (second, _) = pipeline(&gitlab, runner).await?;

    let url = gitlab.url.parse()?;
    let lookahead = LookAhead::new(&url, Secret::new(READER), Arc::new(SystemClock))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(lookahead.clone().run(stop.clone()));
    // The worker answers in order: a second answer about the first pipeline would come before
    // the one about the second.
    for id in [first, first, second] {
        lookahead.ask("linux", PROJECT, id);
    }
    let answers = answers_until(&lookahead, "linux", second).await;
    stop.cancel();
    worker.await?;
    let pipelines: Vec<u64> = answers.iter().map(|a| a.pipeline).collect();
    ensure!(
        pipelines == vec![first, second],
        "each pipeline answered once: {answers:?}"
    );
    let expected = vec![("test".to_string(), 4), ("deploy".to_string(), 2)];
    ensure!(answers.iter().all(|a| a.stages == expected), "{answers:?}");
    ensure!(lookahead.take_answers("other").is_empty());
    Ok(())
}

/// A schedule of `project` whose next run is `next_run_at`.
fn schedule(project: u64, next_run_at: &str, active: bool) -> ScheduleSpec {
    ScheduleSpec {
        project_id: project,
        next_run_at: next_run_at.into(),
        active,
        ..ScheduleSpec::default()
    }
}

#[tokio::test]
async fn a_project_s_active_schedules_are_read_when_it_is_first_seen() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    let runner = "glrt-lookahead-schedules";
    gitlab.add_runner(runner).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    let (id, _) = pipeline(&gitlab, runner).await?;
    let nightly = "2026-11-28T02:03:00.000Z";
    gitlab
        .control
        .add_schedule(&schedule(PROJECT, nightly, true))
        .await?;
    let paused = schedule(PROJECT, "2026-11-28T05:03:00.000Z", false);
    gitlab.control.add_schedule(&paused).await?;
    let elsewhere = schedule(PROJECT + 1, "2026-11-28T03:03:00.000Z", true);
    gitlab.control.add_schedule(&elsewhere).await?;

    let url = gitlab.url.parse()?;
    let lookahead = LookAhead::new(&url, Secret::new(READER), Arc::new(SystemClock))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(lookahead.clone().run(stop.clone()));
    lookahead.ask("linux", PROJECT, id);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut listings = Vec::new();
    while listings.is_empty() && tokio::time::Instant::now() < deadline {
        listings = lookahead.take_schedules("linux");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    worker.await?;
    let nightly_ms = chrono::DateTime::parse_from_rfc3339(nightly)?.timestamp_millis();
    let expected = ScheduleListing {
        project: PROJECT,
        next_runs: vec![u64::try_from(nightly_ms)?],
    };
    ensure!(
        listings == vec![expected],
        "the active schedule only, read without waiting for the round: {listings:?}"
    );
    ensure!(lookahead.take_schedules("other").is_empty());
    Ok(())
}

#[tokio::test]
async fn schedules_are_refused_as_gitlab_refuses_them() -> Result<()> {
    let gitlab = FakeGitLab::start(&[]).await?;
    gitlab.control.add_api_token(READER, &["read_api"]).await?;
    gitlab
        .control
        .add_api_token("glpat-registry", &["read_registry"])
        .await?;
    let at = "2026-11-28T02:03:00.000Z";
    gitlab
        .control
        .add_schedule(&schedule(PROJECT, at, true))
        .await?;

    let read = client(&gitlab, READER)?
        .active_schedules(PROJECT, 0)
        .await?;
    ensure!(
        read.len() == 1 && read[0].next_run_ms().is_some(),
        "{read:?}"
    );
    let unknown = client(&gitlab, "glpat-unknown")?
        .active_schedules(PROJECT, 0)
        .await;
    ensure!(
        matches!(&unknown, Err(ApiError::Refused { status, .. }) if status.as_u16() == 401),
        "{unknown:?}"
    );
    let narrow = client(&gitlab, "glpat-registry")?
        .active_schedules(PROJECT, 0)
        .await;
    ensure!(
        matches!(&narrow, Err(ApiError::Refused { status, .. }) if status.as_u16() == 403),
        "{narrow:?}"
    );
    let elsewhere = client(&gitlab, READER)?
        .active_schedules(PROJECT + 1, 0)
        .await;
    ensure!(
        matches!(elsewhere, Err(ApiError::NotFound { .. })),
        "{elsewhere:?}"
    );
    Ok(())
}
