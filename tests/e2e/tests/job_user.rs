//! Jobs run as the job user while the sidecar's own temporary directory is private to it (the
//! local provisioner gives every SSH command the sandbox's `tmp/` as `TMPDIR`, under a machines
//! root of mode 700, as on a VM whose /tmp is not world-writable): artifacts still pass from one
//! job to the next, and a job's `mktemp` works.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus};

const WITHIN: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_private_tmpdir_a_job_user_gets_its_artifacts_and_a_working_mktemp() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    std::fs::create_dir(&machines_root)?;
    std::fs::set_permissions(&machines_root, std::fs::Permissions::from_mode(0o700))?;
    let _guard = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    // The default sidecar: the built-in one, jobs as the default job user.
    let pool = PoolSpec::local(
        "jobuser",
        &machines_root,
        "max_machines = 1\ncapacity_per_machine = 1\nidle_time = \"60s\"",
        "mode = \"builtin\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let _autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "",
    )
    .await?;

    let mut build = JobSpec::new(
        &pool.upstream_token,
        &[
            "id -un",
            "scratch=$(mktemp)",
            "echo 'binary v1.0' > \"$scratch\"",
            "mkdir -p dist && cp \"$scratch\" dist/app && rm \"$scratch\"",
            "sha256sum dist/app > dist/app.sha256",
        ],
    );
    build.name = "build".into();
    build.artifacts = vec![ArtifactSpec {
        paths: vec!["dist/".into()],
        ..ArtifactSpec::default()
    }];
    let build_id = gitlab.control.enqueue(&build).await?.id;
    let built = gitlab.control.wait_final(build_id, WITHIN).await?;
    let build_trace = String::from_utf8(gitlab.control.trace(build_id).await?)?;
    ensure!(
        built.status == JobStatus::Success,
        "the build failed: {built:?}\n{build_trace}"
    );
    ensure!(
        !build_trace.lines().any(|l| l.trim() == "root"),
        "the build ran as root:\n{build_trace}"
    );

    let mut deploy = JobSpec::new(
        &pool.upstream_token,
        &["sha256sum -c dist/app.sha256", "cat dist/app", "mktemp -d"],
    );
    deploy.name = "deploy".into();
    deploy.dependencies = vec![build_id];
    let deploy_id = gitlab.control.enqueue(&deploy).await?.id;
    let deployed = gitlab.control.wait_final(deploy_id, WITHIN).await?;
    let trace = String::from_utf8(gitlab.control.trace(deploy_id).await?)?;
    ensure!(
        deployed.status == JobStatus::Success,
        "the dependent job failed: {deployed:?}\n{trace}"
    );
    ensure!(trace.contains("dist/app: OK"), "{trace}");
    ensure!(trace.contains("binary v1.0"), "{trace}");
    Ok(())
}
