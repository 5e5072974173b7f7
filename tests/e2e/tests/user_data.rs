//! Sidecars started from user-data (`[pools.sidecar] start = "user_data"`): the local
//! provisioner runs each machine's own user-data as its boot script; that script fetches the
//! built-in sidecar from the autoscaler, checks its SHA-256 and starts it with the machine's
//! own token. The autoscaler never connects to the machines over SSH, yet they run jobs.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use autoscaler::core::machine::MachineState;
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::{JobSpec, JobStatus};

const WITHIN: Duration = Duration::from_secs(120);

/// Every machine directory under `root` (the local provisioner's sandboxes).
fn sandboxes(root: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.join("machine.json").is_file() {
            dirs.push(path);
        }
    }
    Ok(dirs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_start_their_sidecars_from_user_data_run_jobs_without_ssh() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard { root: root.clone() };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    // Taskscaler's rule keeps an idle machine for `idle_time`, so that both machines are still
    // there to be looked at once the jobs are done: the demand-aware default releases a
    // machine at once when nothing is expected, which on a loaded host can come before the
    // slower machine's sidecar first polls.
    let pool = PoolSpec::local(
        "boot",
        &root,
        "max_machines = 2\ncapacity_per_machine = 1\nidle_time = \"60s\"\nstrategy = \"idle\"",
        "mode = \"builtin\"\nstart = \"user_data\"\nready_timeout = \"60s\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"10s\"",
    )
    .await?;

    let mut jobs = Vec::new();
    for i in 0..3 {
        let spec = JobSpec::new(
            &pool.upstream_token,
            &[&format!("echo job {i} on $(hostname) in $PWD")],
        );
        jobs.push(gitlab.control.enqueue(&spec).await?.id);
    }
    for id in &jobs {
        let view = gitlab.control.wait_final(*id, WITHIN).await?;
        let trace = String::from_utf8_lossy(&gitlab.control.trace(*id).await?).into_owned();
        ensure!(
            view.status == JobStatus::Success,
            "job {id}: {view:?}\n{trace}"
        );
    }

    // Both machines become capacity once their sidecars poll (the second may not have been
    // needed for the jobs, which are short).
    autoscaler
        .wait_machines(WITHIN, "every machine ready", |ms| {
            ms.len() == 2
                && ms.iter().all(|m| {
                    m.state == MachineState::Ready
                        && m.sidecar.is_some()
                        && m.timeline
                            .iter()
                            .any(|t| t.reason.as_deref() == Some("its sidecar asked for a job"))
                })
        })
        .await?;
    let boxes = sandboxes(&root)?;
    ensure!(!boxes.is_empty(), "the machines are still there");
    for sandbox in &boxes {
        let user_data = std::fs::read_to_string(sandbox.join("user-data"))
            .with_context(|| format!("{} was given user-data", sandbox.display()))?;
        ensure!(user_data.starts_with("#!/bin/sh\n"), "{user_data}");
        ensure!(
            !user_data.contains(&pool.upstream_token),
            "the pool's upstream token never goes to a machine"
        );
        let sshd_log = std::fs::read_to_string(sandbox.join("sshd.log")).unwrap_or_default();
        ensure!(
            !sshd_log.contains("Accepted"),
            "nobody logged in over SSH:\n{sshd_log}"
        );
        let sidecar = sandbox.join("home/autoscaler-sidecar/bin/sidecar");
        ensure!(
            sidecar.is_file(),
            "{} fetched its sidecar",
            sandbox.display()
        );
    }
    Ok(())
}
