//! The real sidecar runner loop against an in-process fake GitLab on loopback: the job kinds.
//!
//! Each test starts a fake, registers a runner token through the control API, enqueues
//! jobs, runs `sidecar::runner::run` with `max_builds` so that it ends by itself, and then
//! checks what GitLab saw: job state, trace bytes, checksum, artifacts, request counters.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod common;

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use common::*;
use fake_gitlab::Config;
use fake_gitlab::control::{ArtifactSpec, JobStatus, JobVariable};
use sidecar::runner::Shutdown;

#[tokio::test]
async fn successful_job_trace_is_byte_exact_and_checksummed() {
    let env = env().await;
    // One command printing stdout and stderr interleaved, with bytes that are not UTF-8,
    // a carriage return and no trailing newline on the stderr part.
    let script = r"printf 'out 1\n'; printf 'err \xff\r\n' >&2; printf 'tab\there\n'; printf 'end'";
    let id = env.enqueue(&spec(&[script])).await;
    let summary = env.run_jobs(1).await;
    assert_eq!(summary.jobs.len(), 1);

    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Success, "{view:?}");
    assert_eq!(view.exit_code, None);
    let trace = env.trace(id).await;
    assert_trace_integrity(&view, &trace);
    assert_eq!(
        step_script_output(&trace),
        b"out 1\nerr \xff\r\ntab\there\nend".to_vec(),
        "trace:\n{}",
        text(&trace)
    );
    let t = text(&trace);
    assert!(t.starts_with("Running with sidecar "), "{t}");
    assert!(t.contains("\x1b[32;1m$ printf 'out 1\\n';"), "{t}");
    assert!(t.contains("Job succeeded"), "{t}");

    // What GitLab learned about the runner (§3.1).
    let runner = env.ctl.runner(TOKEN).await.unwrap();
    let info = runner.last_info.expect("info sent");
    assert_eq!(info["name"], "sidecar");
    assert_eq!(info["executor"], "shell");
    assert_eq!(info["shell"], "bash");
    assert_eq!(info["features"].as_object().unwrap().len(), 31);
    assert_eq!(info["features"]["cancel_gracefully"], true);
    assert_eq!(info["features"]["image"], false);
    let system_id = view.system_id.expect("system id");
    assert!(
        sidecar::runner::is_valid_system_id(&system_id),
        "{system_id}"
    );
    let persisted = std::fs::read_to_string(env.dir.path().join(".runner_system_id")).unwrap();
    assert_eq!(persisted.trim(), system_id);
    // The build directory is gone.
    assert!(!env.dir.path().join("builds").join(id.to_string()).exists());
}

#[tokio::test]
async fn failing_script_reports_exit_code() {
    let env = env().await;
    let id = env
        .enqueue(&spec(&["echo before", "exit 3", "echo never"]))
        .await;
    env.run_jobs(1).await;
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(view.exit_code, Some(3));
    let trace = env.trace(id).await;
    assert_trace_integrity(&view, &trace);
    let t = text(&trace);
    assert!(t.contains("before\n"));
    assert!(!t.contains("never\n"));
    assert!(t.contains("ERROR: Job failed: exit code 3"), "{t}");
}

#[tokio::test]
async fn artifacts_are_uploaded_and_downloaded_by_a_dependent_job() {
    // Redirected downloads (302 to storage) as GitLab with object storage does.
    let env = env_with(Config {
        trace_update_interval: Duration::from_secs(1),
        artifacts_redirect: true,
        ..Config::default()
    })
    .await;
    let mut producer = spec(&[
        "mkdir -p out/sub",
        "echo alpha > out/a.txt",
        "echo beta > out/sub/b.txt",
        "echo noise > out/skip.log",
        "echo $CI_JOB_ID > out/job-id",
    ]);
    producer.artifacts = vec![ArtifactSpec {
        name: "out".to_owned(),
        paths: vec!["out/".to_owned()],
        exclude: vec!["out/*.log".to_owned()],
        ..ArtifactSpec::default()
    }];
    let producer_id = env.enqueue(&producer).await;
    env.run_jobs(1).await;
    let view = env.final_view(producer_id).await;
    assert_eq!(
        view.status,
        JobStatus::Success,
        "{}",
        text(&env.trace(producer_id).await)
    );
    assert_eq!(view.artifacts.len(), 1, "{view:?}");
    assert_eq!(view.artifacts[0].filename, "out.zip");
    assert_eq!(view.artifacts[0].artifact_type, "archive");

    let zip_bytes = env
        .ctl
        .artifact(producer_id, "archive")
        .await
        .unwrap()
        .expect("archive stored");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(zip_bytes)).unwrap();
    let mut names: Vec<String> = zip.file_names().map(str::to_owned).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "out/",
            "out/a.txt",
            "out/job-id",
            "out/sub/",
            "out/sub/b.txt"
        ]
    );
    let mut a = String::new();
    zip.by_name("out/a.txt")
        .unwrap()
        .read_to_string(&mut a)
        .unwrap();
    assert_eq!(a, "alpha\n");

    let mut consumer = spec(&["cat out/a.txt out/sub/b.txt", "test ! -e out/skip.log"]);
    consumer.dependencies = vec![producer_id];
    let consumer_id = env.enqueue(&consumer).await;
    env.run_jobs(1).await;
    let view = env.final_view(consumer_id).await;
    let trace = env.trace(consumer_id).await;
    assert_eq!(view.status, JobStatus::Success, "{}", text(&trace));
    let t = text(&trace);
    assert!(t.contains("Downloading artifacts for build"), "{t}");
    assert!(t.contains("alpha\nbeta\n"), "{t}");
}

#[tokio::test]
async fn graceful_cancel_runs_after_script_and_always_artifacts() {
    let env = env().await;
    let mut job = spec(&[
        "echo started > marker.txt",
        "echo started",
        "sleep 60",
        "echo not-reached",
    ]);
    job.after_script = vec!["echo after-script-ran status=$CI_JOB_STATUS".to_owned()];
    job.artifacts = vec![ArtifactSpec {
        paths: vec!["marker.txt".to_owned()],
        when: "always".to_owned(),
        ..ArtifactSpec::default()
    }];
    let id = env.enqueue(&job).await;
    let runner = env.spawn_runner(1);
    env.ctl.wait_running(id, WAIT).await.unwrap();
    assert_eq!(env.ctl.cancel(id).await.unwrap(), JobStatus::Canceling);
    let view = env.final_view(id).await;
    runner.await.unwrap();
    assert_eq!(view.status, JobStatus::Canceled);
    let trace = env.trace(id).await;
    let t = text(&trace);
    assert!(t.contains("after-script-ran status=canceled"), "{t}");
    assert!(!t.contains("not-reached\n"), "{t}");
    assert!(t.contains("ERROR: Job failed: canceled"), "{t}");
    assert_eq!(
        view.artifacts.len(),
        1,
        "when: always artifacts uploaded: {view:?}"
    );
}

#[tokio::test]
async fn hard_cancel_aborts_without_after_script() {
    let env = env().await;
    let mut job = spec(&["echo started", "sleep 60", "echo not-reached"]);
    job.after_script = vec!["echo after-script-ran".to_owned()];
    let id = env.enqueue(&job).await;
    let runner = env.spawn_runner(1);
    env.ctl.wait_running(id, WAIT).await.unwrap();
    // A second cancel forces `canceled` (GitLab's "force cancel"): the runner sees the
    // abort case of §6 at its next update.
    env.ctl.cancel(id).await.unwrap();
    assert_eq!(env.ctl.cancel(id).await.unwrap(), JobStatus::Canceled);
    let summary = tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .expect("job aborted promptly")
        .unwrap();
    let result = summary.jobs[0].result.clone();
    assert_eq!(
        result,
        Some(sidecar::job::BuildResult::Aborted { by_runner: false })
    );
    let view = env.ctl.job(id).await.unwrap();
    assert_eq!(view.status, JobStatus::Canceled);
    let t = text(&env.trace(id).await);
    assert!(!t.contains("after-script-ran"), "{t}");
    assert!(!t.contains("not-reached"), "{t}");
}

#[tokio::test]
async fn job_timeout_kills_the_script() {
    let env = env().await;
    let mut job = spec(&["echo before", "sleep 60", "echo never"]);
    job.timeout = 2;
    job.after_script = vec!["echo cleanup-after-timeout".to_owned()];
    let id = env.enqueue(&job).await;
    let started = std::time::Instant::now();
    env.run_jobs(1).await;
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(
        view.failure_reason.as_deref(),
        Some("job_execution_timeout")
    );
    assert_eq!(view.exit_code, None);
    let trace = env.trace(id).await;
    assert_trace_integrity(&view, &trace);
    let t = text(&trace);
    assert!(t.contains("before\n") && !t.contains("never\n"), "{t}");
    assert!(t.contains("cleanup-after-timeout"), "{t}");
    assert!(t.contains("execution took longer than 2s"), "{t}");
}

#[tokio::test]
async fn masked_values_and_prefixed_tokens_never_reach_the_trace() {
    let env = env().await;
    let secret = "s3cr3t-V4lue-Xyz";
    let mut job = spec(&[
        "echo \"plain: $MY_SECRET\"",
        // The value split across two writes with a pause: masking spans chunk boundaries.
        "printf 's3cr3t-V4'; sleep 0.3; printf 'lue-Xyz\\n'",
        "echo \"$MY_SECRET\" >&2",
        "cat \"$SECRET_FILE\"",
        "echo token glpat-AbCdEf0123456789 end",
        "echo \"$CI_JOB_TOKEN\"",
    ]);
    job.variables = vec![
        JobVariable {
            masked: true,
            ..JobVariable::new("MY_SECRET", secret)
        },
        JobVariable {
            file: true,
            masked: true,
            ..JobVariable::new("SECRET_FILE", "file-secret-content")
        },
    ];
    let enqueued = env.ctl.enqueue(&job).await.unwrap();
    env.run_jobs(1).await;
    let view = env.final_view(enqueued.id).await;
    let trace = env.trace(enqueued.id).await;
    assert_eq!(view.status, JobStatus::Success, "{}", text(&trace));
    assert_trace_integrity(&view, &trace);
    let t = text(&trace);
    assert!(!t.contains(secret), "{t}");
    assert!(!t.contains("V4lue"), "{t}");
    assert!(!t.contains("file-secret-content"), "{t}");
    assert!(!t.contains("AbCdEf0123456789"), "{t}");
    assert!(!t.contains(&enqueued.token), "job token leaked: {t}");
    assert!(t.contains("plain: [MASKED]\n"), "{t}");
    assert!(t.contains("token glpat-[MASKED] end"), "{t}");
    assert!(t.matches("[MASKED]").count() >= 6, "{t}");
}

#[tokio::test]
async fn large_trace_goes_out_in_several_patches() {
    let env = env().await;
    let lines = 45_000;
    let id = env
        .enqueue(&spec(&[&format!(
            "for i in $(seq 1 {lines}); do echo \"line $i 0123456789abcdefghijklmnopqrstuvwxyz\"; done"
        )]))
        .await;
    env.run_jobs(1).await;
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Success);
    let trace = env.trace(id).await;
    assert!(trace.len() > 2 * 1024 * 1024, "{}", trace.len());
    assert_trace_integrity(&view, &trace);
    let expected: String = (1..=lines)
        .map(|i| format!("line {i} 0123456789abcdefghijklmnopqrstuvwxyz\n"))
        .collect();
    assert!(
        step_script_output(&trace) == expected.as_bytes(),
        "script output differs"
    );
    let stats = env.ctl.stats().await.unwrap();
    let patches = stats.count("PATCH /api/v4/jobs/:id/trace", "202");
    assert!(
        patches >= 3,
        "expected several ≤1 MiB patches, got {patches}: {stats:?}"
    );
}

#[tokio::test]
async fn output_limit_truncates_with_notice() {
    let env = env().await;
    let id = env
        .enqueue(&spec(&[
            "for i in $(seq 1 3000); do echo \"line $i\"; done",
        ]))
        .await;
    let mut config = env.runner_config(1);
    config.output_limit = 8 * 1024;
    sidecar::runner::run(config, Shutdown::default())
        .await
        .unwrap();
    let view = env.final_view(id).await;
    assert_eq!(view.status, JobStatus::Success);
    let trace = env.trace(id).await;
    assert_trace_integrity(&view, &trace);
    let t = text(&trace);
    assert!(t.contains("Job's log exceeded limit of 8192 bytes."), "{t}");
    assert!(!t.contains("line 3000\n"));
    assert!(trace.len() < 8 * 1024 + 512);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn sources_are_fetched_from_a_git_repository() {
    let env = env().await;
    let repo = env.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README.txt"), "hello from git\n").unwrap();
    git(&repo, &["add", "README.txt"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let sha = git(&repo, &["rev-parse", "HEAD"]);
    let mut job = spec(&["cat README.txt", "git rev-parse HEAD"]);
    job.repo_url = Some(format!("file://{}", repo.display()));
    job.sha = Some(sha.clone());
    let id = env.enqueue(&job).await;
    env.run_jobs(1).await;
    let view = env.final_view(id).await;
    let t = text(&env.trace(id).await);
    assert_eq!(view.status, JobStatus::Success, "{t}");
    assert!(t.contains("hello from git\n"), "{t}");
    assert!(t.contains(&format!("{sha}\n")), "{t}");
    assert!(t.contains(&format!("Checking out {}", &sha[..8])), "{t}");
}
