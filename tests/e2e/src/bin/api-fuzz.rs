//! The API fuzz run: a live autoscaler (with the fake GitLab behind it), one registered sidecar
//! and one job held for it, then schemathesis against both listeners with their OpenAPI
//! documents from `api-spec/`. Fails on any 5xx, any status the spec does not list and any
//! answer that contradicts the spec.
//!
//! Usage: `api-fuzz` (run by `tests/api-fuzz/run`, which installs schemathesis; `SCHEMATHESIS`
//! names its `st` executable). Settings shared by every pass are in
//! `tests/api-fuzz/schemathesis.toml`; the seed and the bounded example counts make a run
//! repeat the same requests.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec, register_sidecar, repo_root};
use fake_gitlab::control::JobSpec;

/// What the fuzzer is given: the sidecar's runner token and the held job.
struct Held {
    runner_token: String,
    job_id: u64,
    job_token: String,
}

/// One schemathesis run: a spec, the URL it is served under, and which operations.
struct Pass {
    name: &'static str,
    spec: &'static str,
    url: String,
    filter: &'static [&'static str],
}

/// Operations fuzzed after the others, because they end what the others need: a job update
/// can end the held job (`state=failed`), and these two end the sidecar's token.
const JOB_ENDING: &str = "^PUT /jobs/\\{id\\}$";
const IDENTITY_ENDING: &str = "^(DELETE /runners|POST /runners/reset_authentication_token)$";
const EITHER_ENDING: &str =
    "^(PUT /jobs/\\{id\\}|DELETE /runners|POST /runners/reset_authentication_token)$";

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("api-fuzz: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool> {
    let st = std::env::var("SCHEMATHESIS").context("SCHEMATHESIS names schemathesis's `st`")?;
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&[]).await?;
    let pool = PoolSpec::new("fuzz");
    gitlab.add_runner(&pool.upstream_token).await?;
    // A short long poll: the fuzzer's job requests would otherwise each wait 50 s.
    let autoscaler = Autoscaler::start(
        dir.path(),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"1s\"",
    )
    .await?;
    let held = hold_a_job(&gitlab, &autoscaler, &pool).await?;
    let passes = [
        Pass {
            name: "runner API",
            spec: "runner-api.yaml",
            url: format!("{}/api/v4", autoscaler.url),
            filter: &["--exclude-name-regex", EITHER_ENDING],
        },
        Pass {
            name: "runner API, job updates",
            spec: "runner-api.yaml",
            url: format!("{}/api/v4", autoscaler.url),
            filter: &["--include-name-regex", JOB_ENDING],
        },
        Pass {
            name: "runner API, calls that end the sidecar's token",
            spec: "runner-api.yaml",
            url: format!("{}/api/v4", autoscaler.url),
            filter: &["--include-name-regex", IDENTITY_ENDING],
        },
        Pass {
            name: "admin API",
            spec: "admin-api.yaml",
            url: autoscaler.admin_url.clone(),
            filter: &[],
        },
    ];
    let mut passed = true;
    for pass in &passes {
        passed &= schemathesis(&st, pass, &held)?;
    }
    Ok(passed)
}

/// Registers a sidecar, queues a job at GitLab and takes it as that sidecar would: the job is
/// then held by the autoscaler, handed to the sidecar and not yet accepted.
async fn hold_a_job(gitlab: &FakeGitLab, autoscaler: &Autoscaler, pool: &PoolSpec) -> Result<Held> {
    let runner_token = register_sidecar(&autoscaler.url, &pool.registration_token, "fuzz").await?;
    let job = gitlab
        .control
        .enqueue(&JobSpec::new(pool.upstream_token.as_str(), &["echo fuzz"]))
        .await?;
    let client = reqwest::Client::new();
    for _ in 0..30 {
        let response = client
            .post(format!("{}/api/v4/jobs/request", autoscaler.url))
            .json(&serde_json::json!({"token": runner_token}))
            .send()
            .await?;
        if response.status() == reqwest::StatusCode::CREATED {
            let payload: serde_json::Value = response.json().await?;
            let job_id = payload["id"].as_u64().context("a job without an id")?;
            if job_id != job.id {
                bail!("handed job {job_id}, queued {}", job.id);
            }
            let job_token = payload["token"].as_str().context("a job without a token")?;
            return Ok(Held {
                runner_token,
                job_id,
                job_token: job_token.to_string(),
            });
        }
    }
    bail!("job {} was never handed to the sidecar", job.id)
}

fn schemathesis(st: &str, pass: &Pass, held: &Held) -> Result<bool> {
    let root = repo_root();
    let spec = root.join("api-spec").join(pass.spec);
    let mut command = std::process::Command::new(st);
    command
        .arg("--config-file")
        .arg(root.join("tests/api-fuzz/schemathesis.toml"))
        .arg("run")
        .arg(&spec)
        .args(["--url", &pass.url])
        .args(pass.filter)
        .env("FUZZ_JOB_ID", held.job_id.to_string())
        .env("FUZZ_JOB_TOKEN", &held.job_token)
        .env("FUZZ_RUNNER_TOKEN", &held.runner_token)
        // Whatever schemathesis leaves behind goes under target/.
        .current_dir(root.join("target"));
    eprintln!("api-fuzz: {} ({})", pass.name, pass.spec);
    let started = std::time::Instant::now();
    let status = command
        .status()
        .with_context(|| format!("cannot run {st}"))?;
    eprintln!(
        "api-fuzz: {} took {:.0?}: {status}",
        pass.name,
        started.elapsed()
    );
    Ok(status.success())
}
