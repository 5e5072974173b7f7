//! The autoscaler's own `POST /runners/verify` at start-up carries the pool's `info`, as
//! runners do since v19.3: GitLab records it for the runner manager and reads from its
//! `features` whether jobs can be canceled gracefully (with `after_script`) before the first job
//! request brings them.

use anyhow::{Context, Result, ensure};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_verify_tells_gitlab_what_the_pools_runners_support() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&[]).await?;
    // A static pool: no sidecar has registered, so no job is asked for and only the verify
    // can have told GitLab anything.
    let pool = PoolSpec::new("verified");
    gitlab.add_runner(&pool.upstream_token).await?;
    let _autoscaler = Autoscaler::start(
        &dir.path().join("a"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "",
    )
    .await?;
    let runner = gitlab.control.runner(&pool.upstream_token).await?;
    ensure!(runner.requests == 0, "a job was asked for: {runner:?}");
    let info = runner
        .last_info
        .clone()
        .context("the verify carried no info")?;
    ensure!(
        info["features"]["cancel_gracefully"] == true && info["features"]["cancelable"] == true,
        "{info}"
    );
    ensure!(!runner.system_ids.is_empty(), "{runner:?}");
    Ok(())
}
