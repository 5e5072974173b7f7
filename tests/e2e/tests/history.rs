//! `autoscaler history` against the fake GitLab's REST API: a runner's finished jobs over
//! two pages, through a rate limit, become a replay that `autoscaler simulate` reads; a token
//! GitLab refuses, or one without `read_api`, is one clear error and exit 77.

use std::path::Path;
use std::process::Output;

use anyhow::{Context, Result, ensure};
use autoscaler::simulate::replay;
use e2e::process::binary;
use e2e::stack::{FakeGitLab, repo_root};
use fake_gitlab::control::{FaultAction, FaultRule, JobSpec};
use serde_json::{Value, json};

const RUNNER_TOKEN: &str = "glrt-history";
/// Jobs that ran and finished: more than one page of 100.
const FINISHED: u32 = 104;

/// Takes the next job as a runner would and, unless `keep_running`, reports it successful.
async fn run_one(gitlab: &FakeGitLab, keep_running: bool) -> Result<()> {
    let http = reqwest::Client::new();
    let job: Value = http
        .post(format!("{}/api/v4/jobs/request", gitlab.url))
        .json(&json!({"token": RUNNER_TOKEN, "info": {"features": {}}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    if keep_running {
        return Ok(());
    }
    let id = job["id"].as_u64().context("a job")?;
    http.put(format!("{}/api/v4/jobs/{id}", gitlab.url))
        .json(&json!({"token": job["token"], "state": "success", "exit_code": 0}))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

fn history(gitlab: &FakeGitLab, runner: u64, token: &str, output: &Path) -> Result<Output> {
    Ok(std::process::Command::new(binary("autoscaler")?)
        .args([
            "history",
            "--url",
            &gitlab.url,
            "--runner",
            &runner.to_string(),
        ])
        .arg("--output")
        .arg(output)
        .env("GITLAB_API_TOKEN", token)
        .output()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runners_week_is_exported_through_pages_and_a_rate_limit_and_replays() -> Result<()> {
    let gitlab = FakeGitLab::start(&["--long-poll", "1s"]).await?;
    gitlab.add_runner(RUNNER_TOKEN).await?;
    let runner = reqwest::Client::new()
        .post(format!("{}/api/v4/runners/verify", gitlab.url))
        .json(&json!({ "token": RUNNER_TOKEN }))
        .send()
        .await?
        .json::<Value>()
        .await?["id"]
        .as_u64()
        .context("verify gives the runner's id")?;
    let mut spec = JobSpec::new(RUNNER_TOKEN, &["true"]);
    spec.project_path = "web/shop".into();
    spec.stage = "build".into();
    gitlab.control.enqueue_batch(&spec, FINISHED + 1).await?;
    for _ in 0..FINISHED {
        run_one(&gitlab, false).await?;
    }
    run_one(&gitlab, true).await?;
    gitlab
        .control
        .add_api_token("glpat-reader", &["read_api"])
        .await?;
    gitlab
        .control
        .add_api_token("glpat-profile", &["read_user"])
        .await?;
    gitlab
        .control
        .add_fault(&FaultRule {
            methods: vec!["GET".into()],
            path_prefix: Some("/api/v4/runners".into()),
            count: Some(1),
            ..FaultRule::new(FaultAction::Status {
                status: 429,
                retry_after: Some(1),
            })
        })
        .await?;

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("week.tsv");
    let out = history(&gitlab, runner, "glpat-reader", &file)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}\n{stderr}", out.status);
    ensure!(
        stderr.contains(&format!(
            "{FINISHED} finished jobs of runner {runner} from 2 pages"
        )) && stderr.contains("1 still running"),
        "{stderr}"
    );
    let stats = gitlab.control.stats().await?;
    ensure!(
        stats.count("GET /api/v4/runners/:id/jobs", "429") == 1,
        "{stats:?}"
    );
    let replay = replay::parse(&std::fs::read_to_string(&file)?)
        .map_err(|problems| anyhow::anyhow!("{problems:?}"))?;
    ensure!(replay.jobs.len() == FINISHED as usize);
    let label = replay.jobs[0].1.label.as_ref().context("labelled")?;
    ensure!(
        label.project == "web/shop" && label.stage == "build",
        "{label:?}"
    );

    let simulated = std::process::Command::new(binary("autoscaler")?)
        .arg("simulate")
        .arg(&file)
        .arg("--policy")
        .arg(repo_root().join("deploy/simulate/policies/demand.toml"))
        .output()?;
    ensure!(
        simulated.status.success(),
        "{}",
        String::from_utf8_lossy(&simulated.stderr)
    );

    for (token, expected) in [
        ("glpat-profile", "insufficient_scope"),
        ("glpat-unknown", "401 Unauthorized"),
    ] {
        let out = history(&gitlab, runner, token, &dir.path().join("refused.tsv"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(77),
            "{token}: {}\n{stderr}",
            out.status
        );
        ensure!(
            stderr.contains(expected) && stderr.lines().count() == 1,
            "{token}: {stderr}"
        );
    }
    let out = history(
        &gitlab,
        runner + 100,
        "glpat-reader",
        &dir.path().join("none.tsv"),
    )?;
    ensure!(out.status.code() == Some(64), "{}", out.status);
    ensure!(!dir.path().join("refused.tsv").exists());
    Ok(())
}
