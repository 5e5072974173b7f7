//! The demo: a fake GitLab, the autoscaler and a few built-in sidecars as real processes on
//! loopback ports, a handful of jobs of different kinds, and a readable summary.
//!
//! Run it with `cargo xtask demo` (which builds everything first).

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::Result;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, Sidecar, register_sidecar};
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus, JobVariable, JobView};

const SIDECARS: usize = 3;

struct DemoJob {
    id: u64,
    what: &'static str,
    enqueued: Instant,
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    println!(
        "Starting a fake GitLab, the autoscaler and {SIDECARS} sidecars (real processes on loopback)..."
    );
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::new("default");
    gitlab.add_runner(&pool.upstream_token).await?;
    let mut autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "",
    )
    .await?;
    let mut sidecars = Vec::new();
    for i in 1..=SIDECARS {
        let token = register_sidecar(
            &autoscaler.url,
            &pool.registration_token,
            &format!("demo-sidecar-{i}"),
        )
        .await?;
        sidecars.push(Sidecar::start(
            &format!("sidecar-{i}"),
            &autoscaler.url,
            &token,
            1,
            &dir.path().join(format!("builds-{i}")),
        )?);
    }
    println!("  GitLab (fake)  {}", gitlab.url);
    println!(
        "  autoscaler     {}   (state in {})",
        autoscaler.url,
        autoscaler.dir.display()
    );
    println!(
        "  sidecars       {SIDECARS} built-in runners, registered with the pool's registration token\n"
    );

    let spec = |script: &[&str]| JobSpec::new(&pool.upstream_token, script);
    let mut jobs = Vec::new();
    let mut enqueue = async |what: &'static str, spec: JobSpec| -> Result<u64> {
        let id = gitlab.control.enqueue(&spec).await?.id;
        jobs.push(DemoJob {
            id,
            what,
            enqueued: Instant::now(),
        });
        println!("  queued job {id:>3} at GitLab: {what}");
        Ok(id)
    };

    enqueue(
        "hello world",
        spec(&["echo 'Hello from a sidecar'", "uname -a"]),
    )
    .await?;
    enqueue(
        "a build log of 5,000 lines",
        spec(&["for i in $(seq 1 5000); do echo \"compiling unit $i\"; done"]),
    )
    .await?;
    let mut build = spec(&[
        "mkdir -p dist",
        "echo 'binary v1.0' > dist/app",
        "sha256sum dist/app | tee dist/app.sha256",
    ]);
    build.name = "build".into();
    build.artifacts = vec![ArtifactSpec {
        paths: vec!["dist/".into()],
        ..ArtifactSpec::default()
    }];
    let build_id = enqueue("build with artifacts", build).await?;
    let mut secret = spec(&["echo \"deploying with token $DEPLOY_TOKEN\""]);
    secret.variables = vec![JobVariable {
        masked: true,
        ..JobVariable::new("DEPLOY_TOKEN", "super-secret-value")
    }];
    enqueue("masked secret", secret).await?;
    enqueue(
        "failing tests (exit 2)",
        spec(&["echo 'running tests'", "echo '1 test failed' >&2", "exit 2"]),
    )
    .await?;
    let mut cleanup = spec(&["echo 'integration tests'"]);
    cleanup.after_script = vec!["echo 'after_script: cleaning up'".into()];
    enqueue("after_script", cleanup).await?;
    let long = enqueue(
        "long job, canceled",
        spec(&["for i in $(seq 1 600); do echo \"still working $i\"; sleep 0.1; done"]),
    )
    .await?;

    let view = gitlab
        .control
        .wait_final(build_id, Duration::from_secs(120))
        .await?;
    let mut deploy = spec(&["cat dist/app", "sha256sum -c dist/app.sha256"]);
    deploy.name = "deploy".into();
    deploy.dependencies = vec![view.id];
    enqueue("deploy, using build's artifacts", deploy).await?;

    gitlab
        .control
        .wait_running(long, Duration::from_secs(120))
        .await?;
    println!("  canceling job {long} at GitLab while it runs");
    gitlab.control.cancel(long).await?;

    println!("\nWaiting for every job to finish...\n");
    let mut rows = Vec::new();
    for job in &jobs {
        let view = gitlab
            .control
            .wait_final(job.id, Duration::from_secs(180))
            .await?;
        let trace = gitlab.control.trace(job.id).await?;
        rows.push((job, view, trace, job.enqueued.elapsed()));
    }
    print_summary(&rows);

    let stats = gitlab.control.stats().await?;
    println!(
        "\nWhat GitLab saw (every call came from the autoscaler, with the pool's runner token or a job token):"
    );
    for (route, by_status) in &stats.requests {
        let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n}×{s}")).collect();
        println!("  {route:<40} {}", counts.join(", "));
    }

    println!("\nStopping: sidecars first, then the autoscaler (SIGTERM, graceful).");
    for s in &mut sidecars {
        s.stop().await?;
    }
    let status = autoscaler.proc.stop(Duration::from_secs(60)).await?;
    println!("  autoscaler exited: {status}");
    Ok(())
}

fn print_summary(rows: &[(&DemoJob, JobView, Vec<u8>, Duration)]) {
    println!(
        "{:>4}  {:<32} {:<9} {:<16} {:>4} {:>9} {:>9}  trace checksum",
        "job", "what", "status", "failure", "exit", "trace", "artifacts"
    );
    for (job, view, trace, _) in rows {
        let artifacts: u64 = view.artifacts.iter().map(|a| a.size).sum();
        let checksum = if view.reported_checksum.as_deref() == Some(view.trace_crc32.as_str()) {
            "matches runner"
        } else {
            "MISMATCH"
        };
        println!(
            "{:>4}  {:<32} {:<9} {:<16} {:>4} {:>9} {:>9}  {}",
            view.id,
            job.what,
            view.status.as_str(),
            view.failure_reason.as_deref().unwrap_or("-"),
            view.exit_code.map_or("-".to_string(), |c| c.to_string()),
            human(trace.len() as u64),
            if artifacts == 0 {
                "-".to_string()
            } else {
                human(artifacts)
            },
            checksum,
        );
    }
    let ok = rows
        .iter()
        .filter(|(_, v, _, _)| v.status == JobStatus::Success)
        .count();
    println!(
        "\n{} jobs: {ok} succeeded, {} failed, {} canceled.",
        rows.len(),
        rows.iter()
            .filter(|(_, v, _, _)| v.status == JobStatus::Failed)
            .count(),
        rows.iter()
            .filter(|(_, v, _, _)| v.status == JobStatus::Canceled)
            .count()
    );
    for (job, view, trace, _) in rows {
        let text = String::from_utf8_lossy(trace);
        if job.what == "masked secret" {
            let shown = text
                .lines()
                .find(|l| l.starts_with("deploying with token"))
                .unwrap_or("");
            println!("Masked variable in job {}'s log: {shown:?}", view.id);
        }
        if job.what.starts_with("deploy") {
            let ok = text.lines().any(|l| l.contains("dist/app: OK"));
            println!(
                "Job {} checked the build's artifact through the relay: {}",
                view.id,
                if ok { "sha256 OK" } else { "FAILED" }
            );
        }
        if job.what.starts_with("long job") {
            let after = text.lines().filter(|l| l.contains("still working")).count();
            println!(
                "Job {} was canceled after {after} lines of output.",
                view.id
            );
        }
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
