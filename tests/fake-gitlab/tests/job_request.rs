//! `POST /api/v4/jobs/request` and the runner identity calls (runner-protocol.md §2, §3).

mod common;

use std::time::{Duration, Instant};

use common::{PROMPT, RUNNER_TOKEN, Runner, features, header, http, job_id, server};
use fake_gitlab::control::{JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn no_job_answers_204_with_last_update() {
    let (server, _control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    let response = runner.request().await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let value = header(&response, "x-gitlab-last-update").expect("Rails sets the queue value");
    assert!(!value.is_empty());
    assert_eq!(header(&response, "gitlab-ci-builds-polling"), Some("yes"));
}

#[tokio::test]
async fn held_long_poll_is_woken_by_enqueue_then_the_next_request_gets_the_job() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
    let remembered = runner.last_update.clone().unwrap();

    let mut held_runner = runner.clone();
    let started = Instant::now();
    let held = tokio::spawn(async move {
        let response = held_runner.request().await;
        (
            response.status(),
            header(&response, "x-gitlab-last-update").map(str::to_owned),
        )
    });
    // The held request is the second one this token made.
    control
        .wait_runner_requests(RUNNER_TOKEN, 2, PROMPT)
        .await
        .unwrap();
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["echo hi"]))
        .await
        .unwrap();

    let (status, last_update) = tokio::time::timeout(PROMPT, held).await.unwrap().unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        last_update, None,
        "Workhorse answers without X-GitLab-Last-Update"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "woken, not timed out"
    );

    // The runner still sends the old value; the queue moved on, so Rails hands out the job.
    assert_eq!(runner.last_update.as_deref(), Some(remembered.as_str()));
    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), job.id);
    assert_eq!(payload["token"], job.token);
}

#[tokio::test]
async fn long_poll_times_out_with_204_without_last_update() {
    let (server, _control) = server(|c| c.long_poll = Duration::from_millis(200)).await;
    let mut runner = Runner::new(&server, features(&[]));
    runner.request().await;
    let started = Instant::now();
    let response = runner.request().await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&response, "x-gitlab-last-update"), None);
}

#[tokio::test]
async fn without_long_polling_a_current_last_update_gets_204_with_the_header() {
    let (server, _control) = server(|c| c.long_poll = Duration::ZERO).await;
    let mut runner = Runner::new(&server, features(&[]));
    runner.request().await;
    let value = runner.last_update.clone().unwrap();
    let response = runner.request().await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        header(&response, "x-gitlab-last-update"),
        Some(value.as_str())
    );
    assert_eq!(header(&response, "gitlab-ci-builds-polling"), None);
}

#[tokio::test]
async fn unknown_token_is_403_and_missing_token_400() {
    let (server, _control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    runner.token = "glrt-unknown".into();
    assert_eq!(runner.request().await.status(), StatusCode::FORBIDDEN);

    let url = format!("{}/api/v4/jobs/request", server.url());
    let response = http()
        .post(&url)
        .json(&json!({"info": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"error": "token is missing"})
    );

    let response = http().post(&url).body("not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn body_over_32_kib_is_413() {
    let (server, _control) = server(|_| {}).await;
    let url = format!("{}/api/v4/jobs/request", server.url());
    let big = json!({ "token": RUNNER_TOKEN, "padding": "x".repeat(33 * 1024) }).to_string();

    let response = http().post(&url).body(big.clone()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // Chunked (no Content-Length): counted while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
        .into_bytes()
        .chunks(4096)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let response = http().post(&url).body(body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn job_request_records_system_id_and_features() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&["cancel_gracefully"]));
    runner.take_job().await;

    let view = control.job(job.id).await.unwrap();
    assert_eq!(view.status, JobStatus::Running);
    assert_eq!(view.system_id.as_deref(), Some("s_0123456789ab"));
    let runner_features = view.runner_features.unwrap();
    assert_eq!(runner_features.get("cancel_gracefully"), Some(&true));
    assert_eq!(runner_features.get("two_phase_job_commit"), Some(&false));

    let runners = control.runners().await.unwrap();
    assert_eq!(runners.len(), 1);
    assert_eq!(runners[0].requests, 1);
    assert_eq!(runners[0].system_ids, vec!["s_0123456789ab".to_owned()]);
    assert_eq!(runners[0].last_info.as_ref().unwrap()["executor"], "shell");
}

#[tokio::test]
async fn job_requiring_a_missing_feature_is_dropped_as_runner_unsupported() {
    let (server, control) = server(|_| {}).await;
    let needy = control
        .enqueue(&JobSpec {
            required_features: vec!["multi_build_steps".into()],
            ..JobSpec::new(RUNNER_TOKEN, &["true"])
        })
        .await
        .unwrap();
    let plain = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&["refspecs"]));

    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), plain.id);
    let view = control.wait_final(needy.id, PROMPT).await.unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("runner_unsupported"));
}

#[tokio::test]
async fn an_orphaned_runner_gets_403_or_422_runner_is_orphaned() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    for (status, message) in [
        (422, "Runner is orphaned"),
        (403, "403 Forbidden - Runner is orphaned"),
    ] {
        control
            .set_orphaned(RUNNER_TOKEN, Some(status))
            .await
            .unwrap();
        let response = runner.request().await;
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(
            response.json::<Value>().await.unwrap(),
            json!({ "message": message })
        );
    }
    control.set_orphaned(RUNNER_TOKEN, None).await.unwrap();
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn payload_has_gitlab_json_types() {
    let (server, control) = server(|_| {}).await;
    control
        .enqueue(&JobSpec {
            after_script: vec!["echo bye".into()],
            ..JobSpec::new(RUNNER_TOKEN, &["echo hi"])
        })
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    assert!(payload["job_info"]["project_jobs_running_on_instance_runners_count"].is_string());
    assert!(payload["job_info"]["time_in_queue_seconds"].is_u64());
    assert_eq!(payload["job_info"]["queue_size"], 1);
    assert_eq!(payload["job_info"]["queue_depth"], 1);
    assert!(payload["runner_info"]["timeout"].is_u64());
    assert!(payload["git_info"]["refspecs"].is_array());
    assert_eq!(payload["steps"][1]["name"], "after_script");
    let server_url = payload["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["key"] == "CI_SERVER_URL")
        .unwrap();
    assert_eq!(server_url["value"], server.url());
}

#[tokio::test]
async fn verify_unregister_and_router_discovery() {
    let (server, control) = server(|_| {}).await;
    let base = server.url();
    let body = json!({ "token": RUNNER_TOKEN, "system_id": "s_aaaaaaaaaaaa", "info": {} });

    let response = http()
        .post(format!("{base}/api/v4/runners/verify"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let verified: Value = response.json().await.unwrap();
    assert!(verified["id"].as_u64().unwrap() > 0);
    assert_eq!(verified["token"], RUNNER_TOKEN);
    assert!(verified["token_expires_at"].is_null());

    let response = http()
        .post(format!("{base}/api/v4/runners/verify"))
        .json(&json!({ "token": "glrt-nope" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    let response = http()
        .get(format!("{base}/api/v4/runners/router/discovery"))
        .header("RUNNER-TOKEN", RUNNER_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_IMPLEMENTED);

    let managers = format!("{base}/api/v4/runners/managers");
    let response = http().delete(&managers).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = http().delete(&managers).json(&body).send().await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "manager already gone"
    );

    let legacy = format!("{base}/api/v4/runners");
    let response = http()
        .delete(&legacy)
        .header("RUNNER-TOKEN", RUNNER_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = http().delete(&legacy).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(control.runners().await.unwrap().is_empty());
}

#[tokio::test]
async fn control_rejects_bad_specs() {
    let (_server, control) = server(|_| {}).await;
    let error = control
        .enqueue(&JobSpec::new("glrt-unknown", &["true"]))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown runner token"),
        "{error}"
    );
    control.add_runner("glrt-second").await.unwrap();
    control
        .enqueue(&JobSpec::new("glrt-second", &["true"]))
        .await
        .unwrap();
}

#[tokio::test]
async fn shutdown_answers_a_held_long_poll_and_completes() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    runner.request().await;
    let held = tokio::spawn(async move { runner.request().await.status() });
    control
        .wait_runner_requests(RUNNER_TOKEN, 2, PROMPT)
        .await
        .unwrap();

    tokio::time::timeout(PROMPT, server.shutdown())
        .await
        .expect("shutdown is prompt");
    let status = tokio::time::timeout(PROMPT, held).await.unwrap().unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn answers_carry_x_request_id() {
    let (server, _control) = server(|_| {}).await;
    let response = http()
        .get(format!("{}/api/v4/runners/router/discovery", server.url()))
        .header("X-Request-Id", "0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&response, "x-request-id"),
        Some("0123456789abcdef0123456789abcdef")
    );
    let response = http()
        .get(format!("{}/api/v4/runners/router/discovery", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&response, "x-request-id").map(str::len), Some(32));
}

#[tokio::test]
async fn a_batch_queues_distinct_jobs_handed_out_in_order() {
    let (server, control) = server(|_| {}).await;
    let spec = JobSpec::new(RUNNER_TOKEN, &["true"]);
    let queued = control.enqueue_batch(&spec, 3).await.unwrap();
    assert_eq!(queued.len(), 3);
    let ids: std::collections::BTreeSet<u64> = queued.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), 3, "each copy is its own job");
    assert_ne!(
        queued[0].token, queued[1].token,
        "each job has its own token"
    );

    let mut runner = Runner::new(&server, features(&[]));
    for expected in &queued {
        let payload = runner.take_job().await;
        assert_eq!(job_id(&payload), expected.id);
        assert_eq!(payload["token"], expected.token);
    }
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);

    let refused = http()
        .post(format!("{}/control/jobs/batch", server.url()))
        .json(&json!({"spec": spec, "count": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
}
