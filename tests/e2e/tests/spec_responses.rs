//! Every answer the autoscaler gives during a real run, held to `api-spec/`: built-in sidecars run
//! jobs (traces, artifacts up and down, a failure, a delayed acceptance) through a recording proxy
//! in front of the mirrored API, and the operator's calls go through one in front of the admin
//! API. Each answer's route, method, status, content type and body must be the spec's.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::openapi::Spec;
use e2e::recording::{Recorded, RecordingProxy};
use e2e::stack::{Autoscaler, Extra, FakeGitLab, PoolSpec, Sidecar, register_sidecar};
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus};
use reqwest::Method;
use serde_json::json;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// The jobs of the run: each kind of call a sidecar makes, and GitLab's variants of the answers.
fn jobs(upstream_token: &str) -> Vec<JobSpec> {
    let mut producer = JobSpec::new(
        upstream_token,
        &[
            "mkdir -p out",
            "echo payload > out/data.txt",
            "echo produced",
        ],
    );
    producer.name = "produce".into();
    producer.artifacts = vec![ArtifactSpec {
        paths: vec!["out/".into()],
        ..ArtifactSpec::default()
    }];
    let mut failing = JobSpec::new(upstream_token, &["echo about to fail", "exit 3"]);
    failing.name = "fail".into();
    let mut accepted_late = JobSpec::new(upstream_token, &["echo accepted late"]);
    accepted_late.name = "accepted-late".into();
    accepted_late.final_put_202 = 1;
    vec![producer, failing, accepted_late]
}

/// Calls of the test's own that the mirrored API refuses, for its error answers.
async fn refused_calls(url: &str, sidecar_token: &str) -> Result<()> {
    let client = reqwest::Client::new();
    let api = format!("{url}/api/v4");
    let calls = [
        (
            Method::POST,
            "/runners/verify",
            json!({"token": "glrt-unknown"}),
        ),
        (Method::POST, "/runners/verify", json!({})),
        (
            Method::POST,
            "/runners",
            json!({"token": "not-a-registration-token"}),
        ),
        (
            Method::POST,
            "/jobs/request",
            json!({"token": "glrt-unknown"}),
        ),
        (
            Method::PUT,
            "/jobs/1",
            json!({"token": "glcbt-unknown", "state": "running"}),
        ),
        (
            Method::POST,
            "/runners/verify",
            json!({"token": sidecar_token}),
        ),
    ];
    for (method, path, body) in calls {
        client
            .request(method, format!("{api}{path}"))
            .json(&body)
            .send()
            .await?;
    }
    client
        .patch(format!("{api}/jobs/1/trace?token=glcbt-unknown"))
        .body("x")
        .send()
        .await?;
    Ok(())
}

/// The operator's calls, through the admin proxy; `job` is one of the run's jobs.
async fn admin_calls(url: &str, token: &str, job: u64) -> Result<()> {
    let client = reqwest::Client::new();
    let gets = [
        "/healthz".to_string(),
        "/status".into(),
        "/pools".into(),
        "/machines".into(),
        "/jobs".into(),
        "/jobs?pool=default".into(),
        "/jobs?pool=nowhere".into(),
        format!("/jobs/{job}"),
        "/jobs/999999".into(),
        "/decisions".into(),
        "/metrics".into(),
    ];
    for path in gets {
        client
            .get(format!("{url}{path}"))
            .bearer_auth(token)
            .send()
            .await?;
    }
    for path in [
        "/pools/default/pause",
        "/pools/default/resume",
        "/pools/nowhere/pause",
    ] {
        client
            .post(format!("{url}{path}"))
            .bearer_auth(token)
            .send()
            .await?;
    }
    client.get(format!("{url}/status")).send().await?;
    Ok(())
}

/// The spec's route of each answer, for the operations the run must have covered.
fn covered(spec: &Spec, answers: &[Recorded]) -> BTreeSet<String> {
    answers
        .iter()
        .filter_map(|a| {
            spec.route_of(&a.path)
                .map(|route| format!("{} {route} {}", a.method, a.status))
        })
        .collect()
}

fn failures(spec: &Spec, answers: &[Recorded]) -> Vec<String> {
    answers.iter().filter_map(|a| spec.check(a).err()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_an_end_to_end_run_is_one_the_specs_describe() -> Result<()> {
    let runner_spec = Spec::load("runner-api.yaml")?;
    let admin_spec = Spec::load("admin-api.yaml")?;
    let dir = tempfile::tempdir()?;
    let gitlab = FakeGitLab::start(&["--trace-update-interval", "1"]).await?;
    let pool = PoolSpec::new("default");
    gitlab.add_runner(&pool.upstream_token).await?;
    let admin_token = format!("admin-{:016x}", rand::random::<u64>());
    let extra = Extra {
        server: "long_poll_timeout = \"2s\"",
        admin_token: Some(&admin_token),
        ..Extra::default()
    };
    let autoscaler = Autoscaler::start_with(
        &dir.path().join("autoscaler"),
        &gitlab.url,
        std::slice::from_ref(&pool),
        &extra,
    )
    .await?;
    let mirrored = RecordingProxy::start(&autoscaler.url).await?;
    let admin = RecordingProxy::start(&autoscaler.admin_url).await?;

    let mut sidecars = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..2 {
        let name = format!("sidecar-{i}");
        let token = register_sidecar(&mirrored.url, &pool.registration_token, &name).await?;
        let builds = dir.path().join(format!("builds-{i}"));
        sidecars.push(Sidecar::start(&name, &mirrored.url, &token, 1, &builds)?);
        tokens.push(token);
    }
    let mut ids = Vec::new();
    for spec in jobs(&pool.upstream_token) {
        ids.push(gitlab.control.enqueue(&spec).await?.id);
    }
    let producer = ids[0];
    let mut consumer = JobSpec::new(&pool.upstream_token, &["cat out/data.txt"]);
    consumer.name = "consume".into();
    consumer.dependencies = vec![producer];
    let view = gitlab.control.wait_final(producer, JOB_TIMEOUT).await?;
    ensure!(view.status == JobStatus::Success, "producer: {view:?}");
    ids.push(gitlab.control.enqueue(&consumer).await?.id);
    for id in &ids {
        let view = gitlab.control.wait_final(*id, JOB_TIMEOUT).await?;
        ensure!(
            matches!(view.status, JobStatus::Success | JobStatus::Failed),
            "job {id}: {view:?}"
        );
    }
    refused_calls(&mirrored.url, &tokens[0]).await?;
    admin_calls(&admin.url, &admin_token, producer).await?;
    for sidecar in &mut sidecars {
        sidecar.stop().await?;
    }

    let runner_answers = mirrored.answers();
    let admin_answers = admin.answers();
    let mut wrong = failures(&runner_spec, &runner_answers);
    wrong.extend(failures(&admin_spec, &admin_answers));
    ensure!(
        wrong.is_empty(),
        "{} of {} answers contradict the specs:\n{}",
        wrong.len(),
        runner_answers.len() + admin_answers.len(),
        wrong.join("\n")
    );

    // The run covered what a sidecar does, so that the check above is no empty one.
    let seen = covered(&runner_spec, &runner_answers);
    for wanted in [
        "POST /runners 201",
        "POST /jobs/request 201",
        "PUT /jobs/{id} 200",
        "PUT /jobs/{id} 202",
        "PATCH /jobs/{id}/trace 202",
        "POST /jobs/{id}/artifacts 201",
        "GET /jobs/{id}/artifacts 200",
        "POST /runners/verify 403",
    ] {
        ensure!(
            seen.contains(wanted),
            "the run never had {wanted}; it had {seen:?}"
        );
    }
    let seen = covered(&admin_spec, &admin_answers);
    for wanted in [
        "GET /jobs/{id} 200",
        "GET /status 401",
        "GET /jobs/{id} 404",
    ] {
        ensure!(seen.contains(wanted), "no {wanted} among {seen:?}");
    }
    ensure!(admin_answers.len() == 15, "{admin_answers:?}");
    Ok(())
}
