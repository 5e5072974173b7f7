//! What GitLab takes, the autoscaler takes and relays with GitLab's answer: the same calls
//! (form-encoded registration and unregistration, trace patches with inclusive, exclusive and
//! empty ranges, a form-encoded final update) made against the fake GitLab directly and through
//! the autoscaler give the same statuses, `Range` headers and trace.

use anyhow::{Context, Result, ensure};
use e2e::stack::{Autoscaler, FakeGitLab, PoolSpec};
use fake_gitlab::control::{JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::Value;

const FORM: &str = "application/x-www-form-urlencoded";
const REGISTRATION_TOKEN: &str = "GR1348941leniency";

/// `Content-Range` and body of each patch, in order; the comments say what GitLab makes of it.
const PATCHES: [(&str, &[u8]); 7] = [
    ("0-4", b"hello"),   // inclusive end
    ("5-11", b" world"), // exclusive end (runners before v11.3)
    ("11-10", b""),      // empty patch at the end: 202
    ("11", b""),         // no end at all: 202
    ("3-3", b"x"),       // wrong start: 416
    ("8-10", b"rld"),    // the tail again: 202, nothing appended
    ("11-11", b"!"),     // inclusive again
];

/// Registers with a form at `url`, takes the queued job, sends every patch and a form-encoded
/// final update, unregisters with a form; returns `(status, Range)` of each patch.
async fn exercise(url: &str, registration_token: &str) -> Result<Vec<(u16, Option<String>)>> {
    let http = reqwest::Client::new();
    let form = |method: reqwest::Method, path: &str, body: String| {
        http.request(method, format!("{url}{path}"))
            .header("content-type", FORM)
            .body(body)
            .send()
    };
    let registered = form(
        reqwest::Method::POST,
        "/api/v4/runners/",
        format!(
            "token={registration_token}&description=form&tag_list=a&tag_list=b&run_untagged=False"
        ),
    )
    .await?;
    ensure!(
        registered.status() == StatusCode::CREATED,
        "registration: {}",
        registered.status()
    );
    let token = registered.json::<Value>().await?["token"]
        .as_str()
        .context("no token")?
        .to_string();
    // The job may be queued a moment after the registration: ask again on a 204.
    let mut request = None;
    for _ in 0..100 {
        let answer = form(
            reqwest::Method::POST,
            "/api/v4/jobs/request",
            format!("token={token}&info[name]=form-runner&info[features][artifacts]=true"),
        )
        .await?;
        if answer.status() != StatusCode::NO_CONTENT {
            request = Some(answer);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let request = request.context("no job within five seconds")?;
    ensure!(
        request.status() == StatusCode::CREATED,
        "job request: {}",
        request.status()
    );
    let job: Value = request.json().await?;
    let id = job["id"].as_u64().context("no job id")?;
    let job_token = job["token"].as_str().context("no job token")?.to_string();

    let mut answers = Vec::new();
    for (range, body) in PATCHES {
        let response = http
            .patch(format!("{url}/api/v4/jobs/{id}/trace"))
            .header("Job-Token", &job_token)
            .header("Content-Range", range)
            .header("Content-Type", "text/plain")
            .body(body)
            .send()
            .await?;
        let stored = response
            .headers()
            .get("range")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        answers.push((response.status().as_u16(), stored));
    }
    let done = form(
        reqwest::Method::PUT,
        &format!("/api/v4/jobs/{id}"),
        format!("token={job_token}&state=success"),
    )
    .await?;
    ensure!(
        done.status() == StatusCode::OK,
        "final update: {}",
        done.status()
    );
    let gone = form(
        reqwest::Method::DELETE,
        "/api/v4/runners",
        format!("token={token}"),
    )
    .await?;
    ensure!(
        gone.status() == StatusCode::NO_CONTENT,
        "unregistration: {}",
        gone.status()
    );
    let verify = form(
        reqwest::Method::POST,
        "/api/v4/runners/verify",
        format!("token={token}"),
    )
    .await?;
    ensure!(
        verify.status() == StatusCode::FORBIDDEN,
        "verify after unregistration: {}",
        verify.status()
    );
    Ok(answers)
}

#[tokio::test]
async fn gitlab_and_the_autoscaler_answer_lenient_calls_alike() -> Result<()> {
    let gitlab = FakeGitLab::start(&["--registration-token", REGISTRATION_TOKEN]).await?;
    let dir = tempfile::tempdir()?;

    // Directly: the job is queued for the runner the form registration is about to create.
    let direct = {
        let watcher = gitlab.control.clone();
        let queue = tokio::spawn(async move {
            // The registration creates the runner; queue its job as soon as it exists.
            loop {
                let runners = watcher.runners().await?;
                if let Some(r) = runners
                    .iter()
                    .find(|r| r.description.as_deref() == Some("form"))
                {
                    ensure!(r.tags == vec!["b".to_string()], "tags {:?}", r.tags);
                    return watcher
                        .enqueue(&JobSpec::new(&r.token, &["true"]))
                        .await
                        .map(|j| j.id)
                        .map_err(Into::into);
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        });
        let answers = exercise(&gitlab.url, REGISTRATION_TOKEN).await;
        let id = queue.await??;
        (answers?, gitlab.control.trace(id).await?)
    };

    let pool = PoolSpec::new("lenient");
    gitlab.add_runner(&pool.upstream_token).await?;
    let autoscaler = Autoscaler::start(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        "long_poll_timeout = \"5s\"",
    )
    .await?;
    let id = gitlab
        .control
        .enqueue(&JobSpec::new(&pool.upstream_token, &["true"]))
        .await?
        .id;
    let relayed = exercise(&autoscaler.url, &pool.registration_token).await?;
    let view = gitlab.control.job(id).await?;
    assert_eq!(view.status, JobStatus::Success);

    assert_eq!(direct.1, b"hello world!");
    assert_eq!(gitlab.control.trace(id).await?, direct.1);
    assert_eq!(
        direct.0.iter().map(|a| a.0).collect::<Vec<_>>(),
        vec![202, 202, 202, 202, 416, 202, 202]
    );
    assert_eq!(direct.0, relayed);
    Ok(())
}
