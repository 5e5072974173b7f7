//! Sources and machine classes within a pool. Sources: the first (here "on-premises", at most
//! one machine) serves first; when it is full, machines come from the next ("cloud"). Both run
//! on one local provider, as two sources in one cloud account do, so neither may take the
//! other's machines for orphans. Classes: a job chooses one with a CI variable and runs on a
//! machine of that class's source; a job naming a class the pool lacks fails at once.

use std::path::Path;

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::counting::WITHIN;
use e2e::scrape::Scrape;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, repo_root};
use fake_gitlab::control::{JobSpec, JobStatus, JobVariable};

/// A `[[pools.sources]]` entry: the counting local provisioner logging to `log`, machines under
/// `root`, and `extra` keys.
fn source_table(name: &str, extra: &str, root: &Path, log: &Path) -> String {
    format!(
        "[[pools.sources]]\nname = \"{name}\"\n{extra}\ncommand = \"{}\"\nreconcile_interval = \"1s\"\n\
         env = {{ LOCAL_ROOT = \"{}\", COUNT_LOG = \"{}\" }}\n",
        repo_root()
            .join("tests/e2e/fixtures/counting-provisioner")
            .display(),
        root.display(),
        log.display()
    )
}

fn creates(log: &Path) -> Result<usize> {
    Ok(std::fs::read_to_string(log)?
        .lines()
        .filter(|l| l.starts_with("create "))
        .count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_first_source_is_full_machines_come_from_the_next() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard { root: root.clone() };
    let (onprem_log, cloud_log) = (dir.path().join("onprem.log"), dir.path().join("cloud.log"));
    std::fs::write(&onprem_log, "")?;
    std::fs::write(&cloud_log, "")?;
    let source = |name: &str, max: &str, log: &Path| source_table(name, max, &root, log);
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let mut pool = PoolSpec::new("local");
    pool.tail = format!(
        // The idle strategy makes exactly the machines the jobs need, so that they can be
        // counted per source (the demand-aware default may make one ahead).
        "{}\n{}\n[pools.scaling]\nmax_machines = 3\nstrategy = \"idle\"\n\n[pools.sidecar]\nmode = \"builtin\"\nready_timeout = \"60s\"\n",
        source("onprem", "max_machines = 1", &onprem_log),
        source("cloud", "", &cloud_log),
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &Extra::default(),
    )
    .await?;

    // Two jobs at once that outlast the other's start: two machines are needed.
    let script = ["sleep 4", "echo done"];
    let mut ids = Vec::new();
    for _ in 0..2 {
        let spec = JobSpec::new(&pool.upstream_token, &script);
        ids.push(gitlab.control.enqueue(&spec).await?.id);
    }
    for id in ids {
        let view = gitlab.control.wait_final(id, WITHIN).await?;
        ensure!(view.status == JobStatus::Success, "{view:?}");
    }
    ensure!(
        creates(&onprem_log)? == 1,
        "the first source made its one machine"
    );
    ensure!(
        creates(&cloud_log)? == 1,
        "the overflow came from the second source"
    );
    let machines = autoscaler.machines().await?;
    let mut sources: Vec<&str> = machines.iter().map(|m| m.source.as_str()).collect();
    sources.sort_unstable();
    ensure!(sources == ["cloud", "onprem"], "{machines:?}");
    ensure!(
        machines.iter().all(|m| !m.state.is_gone()),
        "neither source destroyed the other's machine as an orphan: {machines:?}"
    );
    // The metrics say where the machines came from.
    let scrape = Scrape::get(&autoscaler).await?;
    for source in ["onprem", "cloud"] {
        let labels = [("pool", "local"), ("source", source), ("class", "default")];
        let n = scrape.sum("autoscaler_machines", &labels);
        ensure!(
            n == 1.0,
            "{source}: {n} machines in the metrics\n{}",
            scrape.text
        );
    }
    Ok(())
}

fn class_variable(value: &str) -> JobVariable {
    JobVariable::new("AUTOSCALER_MACHINE_CLASS", value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_on_the_class_it_names_and_an_unknown_class_fails_at_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard { root: root.clone() };
    let (small_log, large_log) = (dir.path().join("small.log"), dir.path().join("large.log"));
    std::fs::write(&small_log, "")?;
    std::fs::write(&large_log, "")?;
    let source = |name: &str, log: &Path| source_table(name, "", &root, log);
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let mut pool = PoolSpec::new("local");
    pool.tail = format!(
        "{}\n{}\n[[pools.classes]]\nname = \"small\"\nsources = [\"small-vms\"]\n\n\
         [[pools.classes]]\nname = \"large\"\nsources = [\"large-vms\"]\ncapacity_per_machine = 2\n\n\
         [pools.scaling]\nmax_machines = 3\n\n[pools.sidecar]\nmode = \"builtin\"\nready_timeout = \"60s\"\n",
        source("small-vms", &small_log),
        source("large-vms", &large_log),
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &Extra::default(),
    )
    .await?;

    let mut large = JobSpec::new(&pool.upstream_token, &["echo on a large machine"]);
    large.variables.push(class_variable("large"));
    let large = gitlab.control.enqueue(&large).await?.id;
    let view = gitlab.control.wait_final(large, WITHIN).await?;
    ensure!(view.status == JobStatus::Success, "{view:?}");
    ensure!(
        creates(&large_log)? == 1,
        "made by the large class's source"
    );
    ensure!(
        creates(&small_log)? == 0,
        "no small machine for a large job"
    );
    // The metrics name its class and source (it may be gone by now: idle machines go).
    let scrape = Scrape::get(&autoscaler).await?;
    ensure!(
        scrape.text.contains(
            "autoscaler_machines{pool=\"local\",source=\"large-vms\",class=\"large\",state=\"ready\"}"
        ),
        "machines by source and class:\n{}",
        scrape.text
    );

    let mut gpu = JobSpec::new(&pool.upstream_token, &["echo never"]);
    gpu.variables.push(class_variable("gpu"));
    let gpu = gitlab.control.enqueue(&gpu).await?.id;
    let view = gitlab.control.wait_final(gpu, WITHIN).await?;
    let trace = String::from_utf8_lossy(&gitlab.control.trace(gpu).await?).into_owned();
    ensure!(view.status == JobStatus::Failed, "{view:?}");
    ensure!(
        trace.contains("\"gpu\"") && trace.contains("its classes are: small, large"),
        "the job's log lists the classes:\n{trace}"
    );
    ensure!(!trace.contains("echo never"), "it never ran:\n{trace}");
    ensure!(
        creates(&small_log)? + creates(&large_log)? == 1,
        "no machine for it"
    );
    Ok(())
}
