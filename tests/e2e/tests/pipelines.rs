//! The pipeline-aware forecast through the real processes: a project's pipelines (a build job,
//! then four test jobs, released by the fake GitLab as GitLab releases a stage) run on the
//! local provisioner, whose machines take a boot delay to come up. The first pipeline's test
//! jobs wait for machines to boot: nothing foresaw them. From then on the autoscaler knows the
//! project's shape, and the next pipeline's test jobs find machines ready when they become
//! pending, made for the reason `pipeline_forecast`.

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::counting::WITHIN;
use e2e::replay::{start_mark_line, started_at, wall_ms};
use e2e::scrape::Scrape;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, repo_root};
use fake_gitlab::control::{JobSpec, JobStatus};

/// A machine is reported `creating` this long after its create request, as a cloud's boots.
const BOOT_DELAY_S: f64 = 6.0;
/// The build stage's one job; the test stage's jobs become pending when it ends. Longer than
/// a machine takes from create to ready on a busy host (the boot delay, the create call, the
/// injection: up to 21 s seen), so that the forecast can have them ready in time.
const BUILD_S: u64 = 30;
const TESTS: usize = 4;
/// What "finds its machine ready" allows: the sidecar's next job request and the hand-out, a
/// few seconds, under the boot delay a job waits without the forecast.
const READY_WAIT_S: f64 = 5.0;

/// Arrivals are forgotten and idle machines go after `idle_time`, so that each pipeline starts
/// from an empty fleet and only what was learned of pipelines carries over. The target asks for
/// waits well under a boot, as on a cloud whose boot is a minute: the default (30 s) is longer
/// than this pool's 6 s boot, a wait every job may have, and then nothing is made ahead.
const SCALING: &str =
    "max_machines = 6\ncapacity_per_machine = 1\nidle_time = \"15s\"\ntarget_wait = \"1s\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_pipelines_next_stage_finds_its_machines_ready() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let mut pool = PoolSpec::new("local");
    pool.tail = format!(
        "[pools.provisioner]\ncommand = \"{}\"\nreconcile_interval = \"1s\"\n\
         env = {{ LOCAL_ROOT = \"{}\", LOCAL_BOOT_DELAY = \"{BOOT_DELAY_S}\" }}\n\n\
         [pools.scaling]\n{SCALING}\n\n[pools.sidecar]\nmode = \"builtin\"\nready_timeout = \"60s\"\n",
        repo_root().join("provisioners/local/provisioner").display(),
        machines_root.display(),
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"10s\"",
    )
    .await?;

    let unforeseen = run_pipeline(&gitlab, &pool.upstream_token).await?;
    eprintln!("first pipeline, test jobs waited (s): {unforeseen:?}");
    ensure!(
        max(&unforeseen) >= BOOT_DELAY_S,
        "with nothing learned, a test job waits for a machine to boot: {unforeseen:?}"
    );
    wait_for_an_empty_fleet(&autoscaler).await?;

    let foreseen = run_pipeline(&gitlab, &pool.upstream_token).await?;
    eprintln!("second pipeline, test jobs waited (s): {foreseen:?}");
    ensure!(
        max(&foreseen) <= READY_WAIT_S,
        "the learned test stage found its machines ready (each job waited at most \
         {READY_WAIT_S} s): {foreseen:?}"
    );
    let scrape = Scrape::get(&autoscaler).await?;
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

/// Runs one pipeline of the project; how long each test job waited from becoming pending
/// (when the build job ended) to running.
async fn run_pipeline(gitlab: &FakeGitLab, token: &str) -> Result<Vec<f64>> {
    let job = |stage: &str, name: String, script: &[&str]| {
        let mut spec = JobSpec::new(token, script);
        spec.stage = stage.into();
        spec.name = name;
        spec.project_id = 7;
        spec
    };
    let build = job("build", "compile".into(), &[&format!("sleep {BUILD_S}")]);
    let mark = start_mark_line();
    let tests = (1..=TESTS)
        .map(|i| job("test", format!("unit {i}/{TESTS}"), &[&mark, "sleep 3"]))
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
