//! Several pools in one service, each its own runner at GitLab with its own token, provisioner
//! and sidecars: each serves its own jobs, side by side.

use anyhow::{Context, Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::counting::WITHIN;
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec};
use fake_gitlab::control::{JobSpec, JobStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_with_their_own_tokens_serve_their_own_jobs_side_by_side() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard { root: root.clone() };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pools: Vec<PoolSpec> = ["alpha", "beta"]
        .iter()
        .map(|name| PoolSpec::local(name, &root, "max_machines = 2", "mode = \"builtin\""))
        .collect();
    for pool in &pools {
        gitlab.add_runner(&pool.upstream_token).await?;
    }
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        &pools,
        &Extra::default(),
    )
    .await?;

    let mut jobs = Vec::new();
    for pool in &pools {
        for _ in 0..2 {
            let spec = JobSpec::new(
                &pool.upstream_token,
                &["echo ran-on=$AUTOSCALER_LOCAL_MACHINE"],
            );
            jobs.push((pool.name.clone(), gitlab.control.enqueue(&spec).await?.id));
        }
    }
    for (pool, id) in &jobs {
        let view = gitlab.control.wait_final(*id, WITHIN).await?;
        ensure!(view.status == JobStatus::Success, "{pool}: {view:?}");
    }
    let machines = autoscaler.machines().await?;
    for (pool, id) in jobs {
        let trace = String::from_utf8_lossy(&gitlab.control.trace(id).await?).into_owned();
        let provider_id = trace
            .lines()
            .find_map(|l| l.strip_prefix("ran-on="))
            .context("the job says where it ran")?;
        let machine = machines
            .iter()
            .find(|m| m.provider_id.as_deref() == Some(provider_id))
            .with_context(|| format!("machine {provider_id} is one of ours"))?;
        ensure!(
            machine.pool == pool,
            "a job of {pool} ran on {} of pool {}",
            machine.id,
            machine.pool
        );
    }
    Ok(())
}
