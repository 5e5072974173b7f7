//! The pipeline-aware forecast through the real processes: a project's pipelines (a build job,
//! then four test jobs, released by the fake GitLab as GitLab releases a stage) run on the
//! local provisioner, whose machines take a boot delay to come up. The first pipeline's test
//! jobs wait for machines to boot: nothing foresaw them. From then on the autoscaler knows the
//! project's shape, and the next pipeline's test jobs find machines ready when they become
//! pending, made for the reason `pipeline_forecast`.
//!
//! With an API token the autoscaler also asks GitLab, when it first sees a pipeline, for the
//! jobs still `created` in it (the look-ahead): a pipeline whose test stage grew beyond what
//! was learned finds all its test machines ready, not only the learned count. It reads the
//! project's pipeline schedules too: a scheduled pipeline's first job, which nothing before
//! it foretells, finds a machine made for it before GitLab's `next_run_at`.
//!
//! A build that fails gets no machines for the tests GitLab then skips.

use std::path::Path;

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::counting::WITHIN;
use e2e::replay::{start_mark_line, started_at, wall_ms};
use e2e::scrape::Scrape;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec};
use fake_gitlab::control::{JobSpec, JobStatus, ScheduleSpec};

/// A machine is reported `creating` this long after its create request, as a cloud's boots.
const BOOT_DELAY_S: f64 = 6.0;
/// The build stage's one job; the test stage's jobs become pending when it ends. Longer than
/// a machine takes from create to ready on a busy host (the boot delay, the create call, the
/// injection: up to 21 s seen), so that the forecast can have them ready in time.
const BUILD_S: u64 = 30;
const TESTS: usize = 4;
/// Each test job runs longer than a machine takes to boot, so that a test job that finds no
/// machine waits for a boot, not for another test job to end and free its machine.
const TEST_S: u64 = 10;
/// What "finds its machine ready" allows: the sidecar's next job request and the hand-out, a
/// few seconds, under the boot delay a job waits without the forecast.
const READY_WAIT_S: f64 = 5.0;

/// Arrivals are forgotten and idle machines go after `idle_time`, so that each pipeline starts
/// from an empty fleet and only what was learned of pipelines carries over. The target asks for
/// waits well under a boot, as on a cloud whose boot is a minute: the default (30 s) is longer
/// than this pool's 6 s boot, a wait every job may have, and then nothing is made ahead.
const SCALING: &str =
    "max_machines = 6\ncapacity_per_machine = 1\nidle_time = \"15s\"\ntarget_wait = \"1s\"";

/// The access token the look-ahead reads GitLab's pipelines with.
const API_TOKEN: &str = "glpat-lookahead-e2e";
/// The project every pipeline here belongs to.
const PROJECT: u64 = 7;
/// How long after the start a schedule's run is set: time for a first job of the project (a
/// boot, the injection, the job) and for its machine to go (`idle_time`), with room to spare
/// before the scheduled run's machine is asked for, a lead time ahead.
const SCHEDULED_IN_MS: u64 = 90_000;

/// The fake GitLab and an autoscaler with one local pool whose machines boot in
/// `BOOT_DELAY_S`; with `api_token`, the look-ahead reads GitLab with it. The autoscaler's
/// debug log goes to `log` when given (to the test's stderr otherwise).
struct Stack {
    gitlab: FakeGitLab,
    autoscaler: Autoscaler,
    token: String,
    _cleanup: LocalMachinesGuard,
}

async fn start(dir: &Path, api_token: Option<&str>, log: Option<&Path>) -> Result<Stack> {
    let machines_root = dir.join("machines");
    let cleanup = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::local_booting(
        "local",
        &machines_root,
        BOOT_DELAY_S,
        "",
        SCALING,
        "mode = \"builtin\"\nready_timeout = \"60s\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let upstream = match api_token {
        Some(token) => {
            gitlab.control.add_api_token(token, &["read_api"]).await?;
            format!("api_token = \"{token}\"")
        }
        None => String::new(),
    };
    let extra = Extra {
        server: "long_poll_timeout = \"10s\"",
        upstream: &upstream,
        log_file: log,
        ..Extra::default()
    };
    let autoscaler = Autoscaler::start_with(
        &dir.join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &extra,
    )
    .await?;
    Ok(Stack {
        gitlab,
        autoscaler,
        token: pool.upstream_token.clone(),
        _cleanup: cleanup,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_pipelines_next_stage_finds_its_machines_ready() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let stack = start(dir.path(), None, None).await?;
    let unforeseen = run_pipeline(&stack.gitlab, &stack.token, TESTS).await?;
    eprintln!("first pipeline, test jobs waited (s): {unforeseen:?}");
    ensure!(
        max(&unforeseen) >= BOOT_DELAY_S,
        "with nothing learned, a test job waits for a machine to boot: {unforeseen:?}"
    );
    wait_for_an_empty_fleet(&stack.autoscaler).await?;

    let foreseen = run_pipeline(&stack.gitlab, &stack.token, TESTS).await?;
    eprintln!("second pipeline, test jobs waited (s): {foreseen:?}");
    ensure!(
        max(&foreseen) <= READY_WAIT_S,
        "the learned test stage found its machines ready (each job waited at most \
         {READY_WAIT_S} s): {foreseen:?}"
    );
    ensure_made_for_pipelines(&stack.autoscaler).await
}

/// A build that fails: GitLab skips its tests, and the autoscaler, told by the build's final
/// state, makes no machine for them. The shape is learned from one passing pipeline first;
/// then a pipeline whose build fails a few seconds in, long before its usual end. Had the
/// failure been taken for an early end, the test stage would have been held as released the
/// moment the build ended, and machines made for it (`gitlab_queue`, `pipeline_forecast`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_gets_no_machines_for_the_tests_gitlab_skips() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let stack = start(dir.path(), None, None).await?;
    run_pipeline(&stack.gitlab, &stack.token, TESTS).await?;
    wait_for_an_empty_fleet(&stack.autoscaler).await?;
    let made_ahead = |scrape: &Scrape| {
        ["gitlab_queue", "pipeline_forecast"]
            .map(|reason| {
                scrape.sum(
                    "autoscaler_scale_actions_total",
                    &[("action", "create"), ("reason", reason)],
                )
            })
            .iter()
            .sum::<f64>()
    };
    let before = made_ahead(&Scrape::get(&stack.autoscaler).await?);

    let job = |stage: &str, name: String, script: &[&str]| {
        let mut spec = JobSpec::new(&stack.token, script);
        spec.stage = stage.into();
        spec.name = name;
        spec.project_id = PROJECT;
        spec
    };
    let build = job("build", "compile".into(), &["sleep 2", "exit 1"]);
    let tests = (1..=TESTS)
        .map(|i| job("test", format!("unit {i}/{TESTS}"), &["true"]))
        .collect();
    let pipeline = stack
        .gitlab
        .control
        .create_pipeline(vec![vec![build], tests])
        .await?;
    let built = stack
        .gitlab
        .control
        .wait_final(pipeline.stages[0][0].id, WITHIN)
        .await?;
    ensure!(built.status == JobStatus::Failed, "{built:?}");
    for test in &pipeline.stages[1] {
        let view = stack.gitlab.control.wait_final(test.id, WITHIN).await?;
        ensure!(view.status == JobStatus::Skipped, "{view:?}");
    }
    // The build's machine goes after idle_time: every decision its end brought is taken.
    wait_for_an_empty_fleet(&stack.autoscaler).await?;
    let scrape = Scrape::get(&stack.autoscaler).await?;
    ensure!(
        made_ahead(&scrape) == before,
        "no machine made for the skipped tests ({before} made ahead before the failed \
         pipeline):\n{}",
        scrape.text
    );
    Ok(())
}

/// The second pipeline has four test jobs where the first had two: learned alone, its test
/// stage would hold two machines and two jobs would wait for a boot; GitLab's created jobs
/// say four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_a_grown_stage_finds_all_its_machines_ready() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("autoscaler.log");
    let stack = start(dir.path(), Some(API_TOKEN), Some(&log)).await?;
    let first = run_pipeline(&stack.gitlab, &stack.token, 2).await?;
    eprintln!("first pipeline (two test jobs), waited (s): {first:?}");
    wait_for_an_empty_fleet(&stack.autoscaler).await?;

    let grown = run_pipeline(&stack.gitlab, &stack.token, TESTS).await?;
    eprintln!("second pipeline ({TESTS} test jobs), waited (s): {grown:?}");
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        max(&grown) <= READY_WAIT_S,
        "every test job of the grown stage found its machine ready (each waited at most \
         {READY_WAIT_S} s): {grown:?}\nlook-ahead log lines:\n{}",
        lines_about_the_look_ahead(&text)
    );
    ensure!(
        text.contains("pipeline look-ahead on"),
        "the autoscaler checked the token and turned the look-ahead on:\n{}",
        lines_about_the_look_ahead(&text)
    );
    ensure_made_for_pipelines(&stack.autoscaler).await
}

/// A schedule's run: GitLab lists its `next_run_at` long before it creates the pipeline, and
/// the autoscaler, which read it when it first saw the project, has a machine ready then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_api_token_a_scheduled_pipeline_finds_its_machine_ready() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("autoscaler.log");
    let stack = start(dir.path(), Some(API_TOKEN), Some(&log)).await?;
    let run_at = wall_ms() + SCHEDULED_IN_MS;
    let next_run_at = chrono::DateTime::from_timestamp_millis(i64::try_from(run_at)?)
        .ok_or_else(|| anyhow::anyhow!("a time"))?
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let nightly = ScheduleSpec {
        project_id: PROJECT,
        next_run_at,
        ..ScheduleSpec::default()
    };
    stack.gitlab.control.add_schedule(&nightly).await?;
    // A pushed job shows the project to the autoscaler, which reads its schedules then.
    let pushed = run_one_job(&stack.gitlab, &stack.token, "push").await?;
    eprintln!("a pushed job, nothing foreseen, waited {pushed} s");
    wait_for_an_empty_fleet(&stack.autoscaler).await?;
    ensure!(
        wall_ms() < run_at,
        "the first job and its machine were gone before the scheduled run"
    );
    // GitLab's schedule worker creates the pipeline at its time, never before: the test plays
    // that worker, so it waits for the time itself.
    tokio::time::sleep(std::time::Duration::from_millis(run_at - wall_ms())).await;
    let scheduled = run_one_job(&stack.gitlab, &stack.token, "schedule").await?;
    eprintln!("the scheduled pipeline's job waited {scheduled} s");
    let text = std::fs::read_to_string(&log)?;
    ensure!(
        scheduled <= READY_WAIT_S,
        "the scheduled job found its machine ready (waited at most {READY_WAIT_S} s): \
         {scheduled} s\nlook-ahead log lines:\n{}",
        lines_about_the_look_ahead(&text)
    );
    ensure_made_for_pipelines(&stack.autoscaler).await
}

/// Creates a pipeline of one job (`CI_PIPELINE_SOURCE` is `source`) and waits for it; how long
/// it waited from its creation (pending at once) to its start on a machine.
async fn run_one_job(gitlab: &FakeGitLab, token: &str, source: &str) -> Result<f64> {
    let mut spec = JobSpec::new(token, &[&start_mark_line()]);
    spec.stage = "extract".into();
    spec.name = "extract".into();
    spec.project_id = PROJECT;
    spec.pipeline_source = source.into();
    let created_ms = wall_ms();
    let pipeline = gitlab.control.create_pipeline(vec![vec![spec]]).await?;
    let id = pipeline.stages[0][0].id;
    let view = gitlab.control.wait_final(id, WITHIN).await?;
    let trace = String::from_utf8_lossy(&gitlab.control.trace(id).await?).into_owned();
    ensure!(view.status == JobStatus::Success, "{view:?}\n{trace}");
    Ok(started_at(&trace)?.saturating_sub(created_ms) as f64 / 1000.0)
}

fn lines_about_the_look_ahead(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("look-ahead") || l.contains("announced") || l.contains("schedules"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn ensure_made_for_pipelines(autoscaler: &Autoscaler) -> Result<()> {
    let scrape = Scrape::get(autoscaler).await?;
    let made = scrape.sum(
        "autoscaler_scale_actions_total",
        &[("action", "create"), ("reason", "pipeline_forecast")],
    );
    ensure!(
        made >= 1.0,
        "machines were made for the pipeline forecast:\n{}",
        scrape.text
    );
    Ok(())
}

/// Runs one pipeline of the project with `tests` test jobs; how long each test job waited from
/// becoming pending (when the build job ended) to running.
async fn run_pipeline(gitlab: &FakeGitLab, token: &str, tests: usize) -> Result<Vec<f64>> {
    let job = |stage: &str, name: String, script: &[&str]| {
        let mut spec = JobSpec::new(token, script);
        spec.stage = stage.into();
        spec.name = name;
        spec.project_id = PROJECT;
        spec
    };
    let build = job("build", "compile".into(), &[&format!("sleep {BUILD_S}")]);
    let mark = start_mark_line();
    let tests = (1..=tests)
        .map(|i| {
            let sleep = format!("sleep {TEST_S}");
            job("test", format!("unit {i}/{tests}"), &[&mark, &sleep])
        })
        .collect();
    let pipeline = gitlab
        .control
        .create_pipeline(vec![vec![build], tests])
        .await?;
    let built = gitlab
        .control
        .wait_final(pipeline.stages[0][0].id, WITHIN)
        .await?;
    ensure!(built.status == JobStatus::Success, "{built:?}");
    // The fake makes the test stage pending in the same change that ends the build job; this
    // is a moment later, which can only shorten the waits measured.
    let pending_ms = wall_ms();
    let mut waits = Vec::new();
    for job in &pipeline.stages[1] {
        let view = gitlab.control.wait_final(job.id, WITHIN).await?;
        let trace = String::from_utf8_lossy(&gitlab.control.trace(job.id).await?).into_owned();
        ensure!(view.status == JobStatus::Success, "{view:?}\n{trace}");
        // When it started on its machine: GitLab calls it running as soon as the autoscaler
        // takes it, before any machine is there.
        let started_ms = started_at(&trace)?;
        waits.push(started_ms.saturating_sub(pending_ms) as f64 / 1000.0);
    }
    Ok(waits)
}

/// Idle machines go after `idle_time`: the next pipeline finds none left from this one.
async fn wait_for_an_empty_fleet(autoscaler: &Autoscaler) -> Result<()> {
    autoscaler
        .wait_machines(WITHIN, "every machine gone", |list| {
            list.iter().all(|m| m.state.is_gone())
        })
        .await?;
    Ok(())
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}
