//! Sources within a pool: the first (here "on-premises", at most one machine) serves first;
//! when it is full, machines come from the next ("cloud"). Both run on one local provider, as
//! two sources in one cloud account do, so neither may take the other's machines for orphans.

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::counting::WITHIN;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, repo_root};
use fake_gitlab::control::{JobSpec, JobStatus};

fn creates(log: &std::path::Path) -> Result<usize> {
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
    let provisioner = repo_root().join("tests/e2e/fixtures/counting-provisioner");
    let source = |name: &str, max: &str, log: &std::path::Path| {
        format!(
            "[[pools.sources]]\nname = \"{name}\"\n{max}\ncommand = \"{}\"\nreconcile_interval = \"1s\"\n\
             env = {{ LOCAL_ROOT = \"{}\", COUNT_LOG = \"{}\" }}\n",
            provisioner.display(),
            root.display(),
            log.display()
        )
    };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let mut pool = PoolSpec::new("local");
    pool.tail = format!(
        "{}\n{}\n[pools.scaling]\nmax_machines = 3\n\n[pools.sidecar]\nmode = \"builtin\"\nready_timeout = \"60s\"\n",
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
    Ok(())
}
