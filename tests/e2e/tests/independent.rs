//! An independent client: `gitlab-python-runner` 14.3.20 from PyPI, written without this
//! project in mind, runs the same jobs against the fake GitLab directly and through the
//! autoscaler, and the outcomes must be the same (status, failure reason, trace, artifacts).
//! It registers with a form, never verifies, never sends `PUT state=running`, sends
//! `Content-Range` with an exclusive end and artifact parameters as form fields
//! (`tests/README.md`). Needs Python 3 and PyPI access (the runner is installed under `target/`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::python_runner::{self, PythonRunner, normalize_trace};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, Sidecar, register_sidecar};
use e2e::unzip;
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus, JobView};

const JOB_TIMEOUT: Duration = Duration::from_secs(60);
const REGISTRATION_TOKEN: &str = "GR1348941independent";

/// One stored artifact: type, format, file name and the archive's files by name.
type Artifact = (String, String, String, BTreeMap<String, Vec<u8>>);

/// What GitLab ends up with for one job.
#[derive(Debug, PartialEq)]
struct Outcome {
    status: JobStatus,
    failure_reason: Option<String>,
    trace: String,
    artifacts: Vec<Artifact>,
}

/// A `file://` repository with a commit, as the runner always clones `repo_url`.
fn repository(dir: &Path) -> Result<(String, String)> {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("out"))?;
    std::fs::write(repo.join("README"), "independent client\n")?;
    std::fs::write(repo.join("out/a.txt"), "from the repository\n")?;
    let git = |args: &[&str]| -> Result<String> {
        let output = std::process::Command::new("git")
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .current_dir(&repo)
            .output()?;
        ensure!(output.status.success(), "git {args:?} failed");
        Ok(String::from_utf8(output.stdout)?.trim().to_string())
    };
    git(&["init", "-q", "-b", "main"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "init"])?;
    let sha = git(&["rev-parse", "HEAD"])?;
    Ok((format!("file://{}", repo.display()), sha))
}

/// A passing job, a failing one and one with artifacts.
fn jobs(runner_token: &str, repo_url: &str, sha: &str) -> Vec<JobSpec> {
    let spec = |script: &[&str]| {
        let mut spec = JobSpec::new(runner_token, script);
        spec.repo_url = Some(repo_url.to_string());
        spec.sha = Some(sha.to_string());
        spec
    };
    let mut pass = spec(&["echo hello", "ls"]);
    pass.after_script = vec!["echo bye".into()];
    let fail = spec(&["echo before", "exit 3"]);
    let mut artifacts = spec(&["echo made here > out/b.txt"]);
    artifacts.artifacts.push(ArtifactSpec {
        name: "out".into(),
        paths: vec!["out/".into()],
        ..ArtifactSpec::default()
    });
    vec![pass, fail, artifacts]
}

async fn outcome(gitlab: &FakeGitLab, view: &JobView) -> Result<Outcome> {
    let trace = String::from_utf8(gitlab.control.trace(view.id).await?)?;
    let mut artifacts = Vec::new();
    for a in &view.artifacts {
        let bytes = gitlab
            .control
            .artifact(view.id, &a.artifact_type)
            .await?
            .with_context(|| format!("job {}: no {} artifact", view.id, a.artifact_type))?;
        artifacts.push((
            a.artifact_type.clone(),
            a.artifact_format.clone(),
            a.filename.clone(),
            unzip(&bytes)?,
        ));
    }
    Ok(Outcome {
        status: view.status,
        failure_reason: view.failure_reason.clone(),
        trace: normalize_trace(&trace),
        artifacts,
    })
}

/// Registers the python runner at `url`, runs every job through it one by one, unregisters.
async fn run_all(
    gitlab: &FakeGitLab,
    url: &str,
    registration_token: &str,
    upstream_token: Option<&str>,
    (repo_url, sha): (&str, &str),
    work: &Path,
) -> Result<Vec<Outcome>> {
    let venv = python_runner::install()?;
    let runner =
        PythonRunner::register(&venv, url, registration_token, &work.join("runner")).await?;
    let token = upstream_token.unwrap_or(&runner.token);
    let mut outcomes = Vec::new();
    for spec in jobs(token, repo_url, sha) {
        let id = gitlab.control.enqueue(&spec).await?.id;
        let log = runner.run_once().await?;
        let view = gitlab
            .control
            .wait_final(id, JOB_TIMEOUT)
            .await
            .with_context(|| format!("job {id} did not finish; runner said:\n{log}"))?;
        ensure!(
            view.handouts == 1,
            "job {id} handed out {} times",
            view.handouts
        );
        outcomes.push(outcome(gitlab, &view).await?);
    }
    runner.unregister().await?;
    Ok(outcomes)
}

#[tokio::test]
async fn the_python_runner_gets_the_same_outcomes_directly_and_through_the_autoscaler() -> Result<()>
{
    // Both runs use the same working directory, so that paths in the traces agree.
    let dir = tempfile::tempdir()?;
    let work = dir.path().join("work");
    let (repo_url, sha) = repository(&dir.path().join("src"))?;
    let repo = (repo_url.as_str(), sha.as_str());
    let direct = {
        let gitlab = FakeGitLab::start(&[
            "--long-poll",
            "2s",
            "--registration-token",
            REGISTRATION_TOKEN,
        ])
        .await?;
        let outcomes = run_all(&gitlab, &gitlab.url, REGISTRATION_TOKEN, None, repo, &work).await?;
        // Rack keeps the last of a repeated form field: GitLab stores only the tag `b`.
        let runners = gitlab.control.runners().await?;
        ensure!(runners.is_empty(), "unregistration left {runners:?}");
        outcomes
    };
    std::fs::remove_dir_all(&work)?;

    let gitlab = FakeGitLab::start(&["--long-poll", "2s"]).await?;
    let pool = PoolSpec::new("python");
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"5s\"",
    )
    .await?;
    let relayed = run_all(
        &gitlab,
        &autoscaler.url,
        &pool.registration_token,
        Some(&pool.upstream_token),
        repo,
        &work,
    )
    .await;
    drop(autoscaler);
    let relayed = relayed?;

    assert_eq!(direct.len(), 3);
    assert_eq!(direct[0].status, JobStatus::Success);
    assert!(direct[0].trace.contains("hello\n") && direct[0].trace.contains("bye\n"));
    assert_eq!(direct[1].status, JobStatus::Failed);
    assert_eq!(direct[1].failure_reason.as_deref(), Some("unknown_failure"));
    let (_, _, _, files) = &direct[2].artifacts[0];
    assert_eq!(files["out/b.txt"], b"made here\n");
    assert_eq!(files["out/a.txt"], b"from the repository\n");
    assert_eq!(direct, relayed);
    Ok(())
}

/// A runner that never sends `PUT state=running` keeps its job past `assign_ack_timeout`
/// while another sidecar polls the same pool: its first trace patch was its acceptance, so the
/// job is not offered again and runs once.
#[tokio::test]
async fn a_job_never_put_running_runs_once_past_the_acknowledgement_window() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let venv = python_runner::install()?;
    let gitlab = FakeGitLab::start(&["--long-poll", "2s"]).await?;
    let mut pool = PoolSpec::new("python");
    pool.tail = "assign_ack_timeout = \"2s\"".into();
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"5s\"",
    )
    .await?;
    let (repo_url, sha) = repository(&dir.path().join("src"))?;
    let runner = PythonRunner::register(
        &venv,
        &autoscaler.url,
        &pool.registration_token,
        &dir.path().join("runner"),
    )
    .await?;
    let mut spec = JobSpec::new(&pool.upstream_token, &["echo start", "sleep 8", "echo end"]);
    spec.repo_url = Some(repo_url);
    spec.sha = Some(sha);
    let id = gitlab.control.enqueue(&spec).await?.id;
    let run = tokio::spawn(async move { runner.run_once().await });
    gitlab.control.wait_running(id, JOB_TIMEOUT).await?;
    // Another sidecar asks for jobs all along the job's eight seconds.
    let other = register_sidecar(&autoscaler.url, &pool.registration_token, "other").await?;
    let _other = Sidecar::start(
        "other",
        &autoscaler.url,
        &other,
        1,
        &dir.path().join("other"),
    )?;
    let log = run.await??;
    let view = gitlab
        .control
        .wait_final(id, JOB_TIMEOUT)
        .await
        .with_context(|| format!("runner said:\n{log}"))?;
    let trace = String::from_utf8(gitlab.control.trace(id).await?)?;
    assert_eq!(view.status, JobStatus::Success, "{trace}");
    assert_eq!(view.handouts, 1);
    assert_eq!(trace.matches("start\n").count(), 1, "{trace}");
    assert_eq!(trace.matches("end\n").count(), 1, "{trace}");
    // The built-in sidecar's header would be there had it run the job too, and its builds
    // directory would hold the job's checkout.
    assert!(!trace.contains("Running with"), "{trace}");
    let other_builds: Vec<_> = std::fs::read_dir(dir.path().join("other"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        other_builds.is_empty(),
        "the other sidecar ran it too: {other_builds:?}"
    );
    Ok(())
}
