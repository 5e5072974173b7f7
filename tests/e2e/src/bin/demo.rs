//! The demo: a fake GitLab and the autoscaler as real processes on loopback ports, a pool that
//! starts with no machine, the local provisioner making machines (local sandboxes with their own
//! sshd), sidecars injected over real SSH, a handful of jobs of different kinds, and a summary of
//! what GitLab got and of each machine's life.
//!
//! Run it with `cargo xtask demo` (which installs what it needs and builds everything first).

#![allow(clippy::print_stdout)]

#[path = "demo/design.rs"]
mod design;

use std::time::{Duration, Instant};

use anyhow::Result;
use autoscaler::core::machine::MachineState;
use autoscaler::store::MachineRecord;
use e2e::LocalMachinesGuard;
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus, JobVariable, JobView};

const IDLE_TIME_S: u64 = 10;

/// The book's pages that explain the summary's parts (`tests/docs/tests/pointers.rs` checks
/// that each exists, with its heading).
const JOBS_PAGE: &str = "docs/src/concepts/jobs.md#when-things-fail";
const MACHINES_PAGE: &str = "docs/src/concepts/machines.md#a-machines-life";
const SIDECARS_PAGE: &str = "docs/src/concepts/sidecars.md#the-mirrored-api";

struct DemoJob {
    id: u64,
    what: &'static str,
}

#[tokio::main]
async fn main() -> Result<()> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let machines_root = dir.path().join("machines");
    let _cleanup = LocalMachinesGuard {
        root: machines_root.clone(),
    };
    println!("Starting a fake GitLab and the autoscaler (real processes on loopback ports)...");
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::local(
        "demo",
        &machines_root,
        &format!("max_machines = 3\ncapacity_per_machine = 2\nidle_time = \"{IDLE_TIME_S}s\""),
        "mode = \"builtin\"",
    );
    gitlab.add_runner(&pool.upstream_token).await?;
    let mut autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "",
    )
    .await?;
    println!("  GitLab (fake)   {}", gitlab.url);
    println!(
        "  autoscaler      {}   (admin API {})",
        autoscaler.url, autoscaler.admin_url
    );
    println!(
        "  pool \"demo\"     local provisioner, at most 3 machines x 2 jobs, idle machines go after {IDLE_TIME_S} s"
    );
    println!(
        "                  machines are sandboxes under {}, each with its own sshd\n",
        machines_root.display()
    );
    println!("The pool has no machine. Queuing jobs at GitLab:");

    let spec = |script: &[&str]| JobSpec::new(&pool.upstream_token, script);
    let mut jobs = Vec::new();
    let mut enqueue = async |what: &'static str, spec: JobSpec| -> Result<u64> {
        let id = gitlab.control.enqueue(&spec).await?.id;
        jobs.push(DemoJob { id, what });
        println!("  job {id:>2}  {what}");
        Ok(id)
    };
    enqueue(
        "hello world",
        spec(&["echo \"Hello from $(hostname), in $HOME\""]),
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
        "long job, canceled while running",
        spec(&["for i in $(seq 1 600); do echo \"still working $i\"; sleep 0.1; done"]),
    )
    .await?;
    for i in 1..=3 {
        enqueue(
            "parallel test shard",
            spec(&[&format!("echo 'shard {i}'"), "sleep 2"]),
        )
        .await?;
    }

    let view = gitlab
        .control
        .wait_final(build_id, Duration::from_secs(180))
        .await?;
    let mut deploy = spec(&["cat dist/app", "sha256sum -c dist/app.sha256"]);
    deploy.name = "deploy".into();
    deploy.dependencies = vec![view.id];
    enqueue("deploy, with build's artifacts", deploy).await?;

    gitlab
        .control
        .wait_running(long, Duration::from_secs(180))
        .await?;
    // Let it print a little first, so that the cancellation visibly interrupts it.
    while gitlab.control.job(long).await?.trace_bytes < 2_000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("  (canceling job {long} at GitLab while it runs)");
    gitlab.control.cancel(long).await?;

    println!("\nWaiting for every job to finish...\n");
    let mut rows = Vec::new();
    for job in &jobs {
        let view = gitlab
            .control
            .wait_final(job.id, Duration::from_secs(180))
            .await?;
        let trace = gitlab.control.trace(job.id).await?;
        rows.push((job, view, trace));
    }
    print_jobs(&rows);
    println!("(The statuses and failure reasons: {JOBS_PAGE})");
    let deviations = report_design(&rows);

    println!("\nWaiting for idle machines to go ({IDLE_TIME_S} s of idleness)...\n");
    let machines = autoscaler
        .wait_machines(
            Duration::from_secs(180),
            "every machine destroyed",
            |list| !list.is_empty() && list.iter().all(|m| m.state == MachineState::Gone),
        )
        .await?;
    print_machines(&machines);
    println!("\n(A machine's states: {MACHINES_PAGE})");

    let stats = gitlab.control.stats().await?;
    println!(
        "\nWhat GitLab saw (every call came from the autoscaler, with the pool's token or a job token):"
    );
    for (route, by_status) in &stats.requests {
        let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{n}x{s}")).collect();
        println!("  {route:<40} {}", counts.join(", "));
    }
    if stats
        .requests
        .iter()
        .any(|(route, by_status)| route.starts_with("PUT") && by_status.contains_key("400"))
    {
        println!(
            "  (a 400 on PUT is expected: the autoscaler's first keep-alive of a job, `state=pending`, asks\n   \
             whether GitLab holds it for two-phase commit; this GitLab, like a default one, runs jobs from\n   \
             hand-out and answers 400, after which the job counts as acknowledged)"
        );
    }
    println!("(Why every call comes from the autoscaler: {SIDECARS_PAGE})");
    let left = std::fs::read_dir(&machines_root)
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0);
    println!("\nMachines left at the provider: {left}.");
    let status = autoscaler.proc.stop(Duration::from_secs(60)).await?;
    println!(
        "Autoscaler stopped (SIGTERM): {status}. Demo took {:.0} s.",
        started.elapsed().as_secs_f64()
    );
    println!(
        "\nThe book explains what this showed: docs/src/ (start at docs/src/getting-started.md);\n\
         `cargo xtask docs` builds it into target/book/, which [admin] book_dir serves on the\n\
         status page's listener at /book/."
    );
    if deviations > 0 {
        anyhow::bail!(
            "{deviations} of {} jobs did not end as designed",
            rows.len()
        );
    }
    if left > 0 {
        anyhow::bail!("{left} machines were left at the provider");
    }
    Ok(())
}

/// Prints, per job, whether it ended as designed (and why not); returns how many did not.
fn report_design(rows: &[(&DemoJob, JobView, Vec<u8>)]) -> usize {
    let mut deviations = 0;
    println!();
    for (job, view, trace) in rows {
        match design::deviation(job.what, view, &String::from_utf8_lossy(trace)) {
            None => {}
            Some(why) => {
                deviations += 1;
                println!("NOT AS DESIGNED: job {} ({}): {why}", view.id, job.what);
            }
        }
    }
    if deviations == 0 {
        println!("Every job ended as designed.");
    }
    deviations
}

fn print_jobs(rows: &[(&DemoJob, JobView, Vec<u8>)]) {
    println!(
        "{:>4}  {:<34} {:<9} {:<15} {:>4} {:>9} {:>9}  trace checksum",
        "job", "what", "status", "failure", "exit", "trace", "artifacts"
    );
    for (job, view, trace) in rows {
        let artifacts: u64 = view.artifacts.iter().map(|a| a.size).sum();
        let checksum = if view.reported_checksum.as_deref() == Some(view.trace_crc32.as_str()) {
            "matches the runner's"
        } else {
            "MISMATCH"
        };
        println!(
            "{:>4}  {:<34} {:<9} {:<15} {:>4} {:>9} {:>9}  {}",
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
    let count = |s: JobStatus| rows.iter().filter(|(_, v, _)| v.status == s).count();
    println!(
        "\n{} jobs: {} succeeded, {} failed, {} canceled.",
        rows.len(),
        count(JobStatus::Success),
        count(JobStatus::Failed),
        count(JobStatus::Canceled)
    );
    for (job, view, trace) in rows {
        let text = String::from_utf8_lossy(trace);
        match job.what {
            "masked secret" => {
                let shown = text
                    .lines()
                    .find(|l| l.starts_with("deploying with token"))
                    .unwrap_or("");
                println!("Masked variable in job {}'s log: {shown:?}", view.id);
            }
            "deploy, with build's artifacts" => {
                let ok = text.lines().any(|l| l.contains("dist/app: OK"));
                println!(
                    "Job {} checked the build's artifact, downloaded through the autoscaler: {}",
                    view.id,
                    if ok { "sha256 OK" } else { "FAILED" }
                );
            }
            "long job, canceled while running" => {
                let lines = text.lines().filter(|l| l.contains("still working")).count();
                println!(
                    "Job {} was canceled after {lines} lines of output.",
                    view.id
                );
            }
            _ => {}
        }
    }
}

fn print_machines(machines: &[MachineRecord]) {
    let Some(t0) = machines.iter().map(|m| m.created_at).min() else {
        return;
    };
    println!(
        "{} machines were made, ran the jobs and were destroyed. Their lives:",
        machines.len()
    );
    for m in machines {
        println!(
            "\n  {} (at the provider: {}; ran {} job{})",
            m.id,
            m.provider_id.as_deref().unwrap_or("-"),
            m.use_count,
            if m.use_count == 1 { "" } else { "s" },
        );
        for t in &m.timeline {
            let at = t.at.saturating_sub(t0) as f64 / 1000.0;
            let why = t
                .reason
                .as_deref()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default();
            println!("    +{at:>6.1}s  {:<11}{why}", t.state.name());
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
