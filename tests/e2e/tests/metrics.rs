//! The metrics an operator builds panels and alerts on: every family from start-up with zero
//! series per pool, a machine lost behind the autoscaler's back counted as a failure of its own
//! reason, a machine running its only job (`max_use_count = 1`) shown busy, and the wait target
//! of a demand-aware pool (none for an idle one) to hold the job waits against.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use autoscaler::admin::PoolStatus;
use autoscaler::core::machine::MachineState;
use e2e::LocalMachinesGuard;
use e2e::chaos::destroy_at_provider;
use e2e::scrape::{Scrape, wait_for};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::JobSpec;

const WITHIN: Duration = Duration::from_secs(120);

/// Counters and histograms that an event creates must be there, at zero, before any event.
const PER_POOL: &[&str] = &[
    "autoscaler_machine_creation_seconds_count",
    "autoscaler_machine_readiness_seconds_count",
    "autoscaler_machine_deletion_seconds_count",
    "autoscaler_machine_lifetime_seconds_count",
    "autoscaler_job_wait_seconds_count",
    "autoscaler_job_wait_gitlab_seconds_count",
    "autoscaler_job_wait_here_seconds_count",
];

fn series_line(scrape: &Scrape, name: &str, labels: &str) -> bool {
    scrape
        .text
        .lines()
        .any(|l| l.starts_with(&format!("{name}{{{labels}}} ")))
}

/// A fake GitLab that knows a pool of local machines, before the autoscaler starts.
struct Prepared {
    gitlab: FakeGitLab,
    pool: PoolSpec,
    machines_root: PathBuf,
    guard: LocalMachinesGuard,
    dir: tempfile::TempDir,
}

/// The same, with the autoscaler running. Fields drop in the order written, and that order is
/// the clean-up: the autoscaler stops, the guard destroys the machines it left, and only then is
/// the directory holding them removed (removed first, the guard finds no machine to destroy and
/// their sidecars outlive the test). Tests borrow from a `Rig`; they never destructure it, since
/// bindings drop in the reverse order of the pattern.
struct Rig {
    autoscaler: Autoscaler,
    _guard: LocalMachinesGuard,
    gitlab: FakeGitLab,
    pool: PoolSpec,
    machines_root: PathBuf,
    _dir: tempfile::TempDir,
}

/// A pool `name` of local machines with these `[pools.scaling]` keys and the built-in sidecar.
async fn prepare(name: &str, scaling: &str) -> Result<Prepared> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let guard = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::local(name, &machines_root, scaling, "mode = \"builtin\"");
    gitlab.add_runner(&pool.upstream_token).await?;
    Ok(Prepared {
        gitlab,
        pool,
        machines_root,
        guard,
        dir,
    })
}

impl Prepared {
    async fn start(self) -> Result<Rig> {
        let autoscaler = Autoscaler::start(
            &self.dir.path().join("autoscaler"),
            &self.gitlab.url,
            std::slice::from_ref(&self.pool),
            "",
        )
        .await?;
        Ok(Rig {
            autoscaler,
            _guard: self.guard,
            gitlab: self.gitlab,
            pool: self.pool,
            machines_root: self.machines_root,
            _dir: self.dir,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_series_from_start_up_and_a_vanished_machine_is_a_failure_of_its_own() -> Result<()> {
    // Two machines kept idle: the one removed at the provider is replaced.
    let rig = prepare(
        "metered",
        "max_machines = 2\nidle_count = 1\nidle_time = \"60s\"\nstrategy = \"idle\"",
    )
    .await?
    .start()
    .await?;
    let Rig {
        autoscaler,
        pool,
        machines_root,
        ..
    } = &rig;
    let first = Scrape::get(autoscaler).await?;
    let pool_label = format!("pool=\"{}\"", pool.name);
    for name in PER_POOL {
        ensure!(
            series_line(&first, name, &pool_label),
            "{name} has no zero series at start-up:\n{}",
            first.text
        );
    }
    for reason in ["failed", "vanished", "create_lost"] {
        let labels = format!("{pool_label},reason=\"{reason}\"");
        ensure!(
            series_line(&first, "autoscaler_machine_failures_total", &labels),
            "no failure series for {reason} at start-up:\n{}",
            first.text
        );
    }
    ensure!(
        series_line(
            &first,
            "autoscaler_scale_actions_total",
            &format!("{pool_label},action=\"destroy\",reason=\"idle_timeout\"")
        ),
        "no zero series for scale actions:\n{}",
        first.text
    );
    // The idle strategy aims at no wait: no target to hold the p95 against.
    ensure!(
        !first.has("autoscaler_target_wait_seconds"),
        "an idle pool shows a wait target:\n{}",
        first.text
    );
    let status = pool_status(autoscaler, &pool.name).await?;
    ensure!(
        status.target_wait_seconds.is_none(),
        "GET /pools shows a wait target for an idle pool: {status:?}"
    );

    let ready = autoscaler
        .wait_machines(WITHIN, "an idle machine ready", |l| {
            l.iter().any(|m| m.state == MachineState::Ready)
        })
        .await?;
    let victim = ready
        .iter()
        .find(|m| m.state == MachineState::Ready)
        .context("no ready machine")?;
    let provider_id = victim.provider_id.clone().context("no provider id")?;
    destroy_at_provider(machines_root, &provider_id)?;
    let gone = autoscaler
        .wait_machines(WITHIN, "the removed machine gone", |l| {
            l.iter()
                .any(|m| m.id == victim.id && m.state == MachineState::Gone)
        })
        .await?;
    let record = gone
        .iter()
        .find(|m| m.id == victim.id)
        .context("the machine's record went")?;
    let gone_step = record
        .timeline
        .iter()
        .find(|t| t.state == MachineState::Gone)
        .context("no gone step")?;
    ensure!(
        gone_step
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("vanished at the provider")),
        "the record does not say the machine vanished: {record:?}"
    );
    wait_for(autoscaler, WITHIN, "a vanished machine counted", |s| {
        s.sum(
            "autoscaler_machine_failures_total",
            &[("pool", &pool.name), ("reason", "vanished")],
        ) == 1.0
    })
    .await?;
    let after = Scrape::get(autoscaler).await?;
    ensure!(
        after.sum(
            "autoscaler_machine_failures_total",
            &[("pool", &pool.name), ("reason", "failed")]
        ) == 0.0,
        "a vanished machine was also counted as failed:\n{}",
        after.text
    );
    Ok(())
}

/// The pool as `GET /pools` shows it.
async fn pool_status(autoscaler: &Autoscaler, pool: &str) -> Result<PoolStatus> {
    autoscaler
        .pools()
        .await?
        .into_iter()
        .find(|p| p.name == pool)
        .with_context(|| format!("GET /pools shows no pool {pool}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_running_its_only_job_is_busy_and_retiring() -> Result<()> {
    let rig = prepare(
        "oneshot",
        "max_machines = 1\nmax_use_count = 1\nidle_time = \"60s\"",
    )
    .await?
    .start()
    .await?;
    let Rig {
        autoscaler,
        gitlab,
        pool,
        ..
    } = &rig;
    // Long enough to be scraped while it runs; it is canceled once seen.
    let job = JobSpec::new(
        &pool.upstream_token,
        &["echo started", "for i in $(seq 1 600); do sleep 0.1; done"],
    );
    let id = gitlab.control.enqueue(&job).await?.id;
    gitlab.wait_started(id, WITHIN).await?;
    let name = pool.name.as_str();
    let scrape = wait_for(autoscaler, WITHIN, "the job's machine busy", |s| {
        s.sum("autoscaler_job_slots", &[("pool", name), ("state", "busy")]) == 1.0
    })
    .await?;
    // Demand-aware by default, aiming at the default p95 of 30 s: an alert holds the waits
    // users see against it.
    ensure!(
        series_line(
            &scrape,
            "autoscaler_target_wait_seconds",
            &format!("pool=\"{name}\"")
        ) && scrape.sum("autoscaler_target_wait_seconds", &[("pool", name)]) == 30.0,
        "no wait target of 30 s:\n{}",
        scrape.text
    );
    // The admin API says the same, and names the intake as the configuration spells it.
    let status = pool_status(autoscaler, name).await?;
    ensure!(
        status.target_wait_seconds == Some(30.0) && status.intake == "on_demand",
        "GET /pools: {status:?}"
    );
    ensure!(
        scrape.sum("autoscaler_machines", &[("pool", name), ("state", "busy")]) == 1.0
            && scrape.sum(
                "autoscaler_machines",
                &[("pool", name), ("state", "draining")]
            ) == 0.0,
        "the machine running its only job is not shown busy:\n{}",
        scrape.text
    );
    ensure!(
        scrape.sum("autoscaler_machines_retiring", &[("pool", name)]) == 1.0,
        "its retirement is not shown:\n{}",
        scrape.text
    );
    gitlab.control.cancel(id).await?;
    gitlab.control.wait_final(id, WITHIN).await?;
    Ok(())
}

/// In preemptive intake a job waits at GitLab, not here, until a sidecar polls: the wait the
/// admin API and the metrics report must include that part (`job_info.time_in_queue_seconds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_reported_includes_the_time_pending_at_gitlab() -> Result<()> {
    // Preemptive: GitLab is asked only for the sidecar that waits, so the job stays pending
    // there while the first machine boots.
    let mut prepared = prepare(
        "preempt",
        "max_machines = 1\nidle_count = 1\nidle_time = \"60s\"\nintake = \"preemptive\"",
    )
    .await?;
    // Machines take at least 2 s to boot, so the job's time at GitLab is at least that.
    prepared.pool.tail = prepared.pool.tail.replace(
        "env = { LOCAL_ROOT",
        "env = { LOCAL_BOOT_DELAY = \"2\", LOCAL_ROOT",
    );
    ensure!(
        prepared.pool.tail.contains("LOCAL_BOOT_DELAY"),
        "{}",
        prepared.pool.tail
    );
    let job = JobSpec::new(&prepared.pool.upstream_token, &["echo waited"]);
    let id = prepared.gitlab.control.enqueue(&job).await?.id;
    let rig = prepared.start().await?;
    let Rig {
        autoscaler,
        gitlab,
        pool,
        ..
    } = &rig;
    gitlab.control.wait_final(id, WITHIN).await?;
    let waits: serde_json::Value = autoscaler
        .admin_get("/waits")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let wait = waits["waits"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["job"] == id))
        .context("no wait for the job")?
        .clone();
    let (total, at_gitlab, here) = (
        wait["waited_ms"].as_u64(),
        wait["waited_in_gitlab_ms"].as_u64(),
        wait["waited_here_ms"].as_u64(),
    );
    ensure!(
        at_gitlab.is_some_and(|ms| ms >= 2000),
        "the machine's boot was not counted as time at GitLab: {wait}"
    );
    ensure!(
        total == at_gitlab.zip(here).map(|(a, b)| a + b),
        "the whole wait is not the sum of its parts: {wait}"
    );
    let scrape = Scrape::get(autoscaler).await?;
    let name = pool.name.as_str();
    ensure!(
        scrape.sum("autoscaler_job_wait_gitlab_seconds_sum", &[("pool", name)]) >= 2.0
            && scrape.sum("autoscaler_job_wait_seconds_count", &[("pool", name)]) == 1.0,
        "{}",
        scrape.text
    );
    Ok(())
}
