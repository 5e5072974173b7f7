//! Job updates, trace, two-phase acceptance and cancellation (runner-protocol.md §3.5, §4, §5, §6).

mod common;

use std::time::Duration;

use common::{PROMPT, RUNNER_TOKEN, Runner, features, header, job_id, job_token, server};
use fake_gitlab::control::{ClientError, JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn put_checks_id_token_and_state() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let runner = Runner::new(&server, features(&[]));

    let response = runner.put_state(job.id, &job.token, "running").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "still pending");
    assert_eq!(header(&response, "job-status"), Some("pending"));

    assert_eq!(
        runner
            .put_state(job.id + 100, &job.token, "running")
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        runner
            .put_state(job.id, "glcbt-wrong", "running")
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn final_put_202_backs_off_then_200_and_records_the_report() {
    let (server, control) = server(|c| c.trace_update_interval = Duration::from_secs(5)).await;
    control
        .enqueue(&JobSpec {
            final_put_202: 2,
            ..JobSpec::new(RUNNER_TOKEN, &["false"])
        })
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    let (id, token) = (job_id(&payload), job_token(&payload));

    let response = runner.put_state(id, &token, "running").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status"), Some("running"));
    assert_eq!(
        header(&response, "x-gitlab-trace-update-interval"),
        Some("5")
    );

    let final_body = json!({
        "state": "failed", "failure_reason": "script_failure", "exit_code": 2,
        "output": { "checksum": "crc32:00000000", "bytesize": 0 },
    });
    for expected_interval in ["1", "2"] {
        let response = runner.put(id, &token, final_body.clone()).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(header(&response, "job-status"), Some("running"));
        assert_eq!(
            header(&response, "x-gitlab-trace-update-interval"),
            Some(expected_interval)
        );
    }
    let response = runner.put(id, &token, final_body.clone()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status"), Some("failed"));

    let view = control.job(id).await.unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(view.exit_code, Some(2));
    assert_eq!(view.reported_checksum.as_deref(), Some("crc32:00000000"));
    assert_eq!(view.reported_bytesize, Some(0));
    assert_eq!(view.final_put_attempts, 3);

    let response = runner.put(id, &token, final_body).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "job is finished");
    assert_eq!(header(&response, "job-status"), Some("failed"));
}

#[tokio::test]
async fn trace_appends_at_the_stored_length_only() {
    let (server, control) = server(|_| {}).await;
    control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    let (id, token) = (job_id(&payload), job_token(&payload));

    let response = runner.patch(id, &token, 0, b"hello ").await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&response, "range"), Some("0-6"));
    assert_eq!(header(&response, "job-status"), Some("running"));
    assert_eq!(
        header(&response, "x-gitlab-trace-update-interval"),
        Some("3")
    );

    let response = runner.patch(id, &token, 3, b"lo world").await;
    assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(header(&response, "range"), Some("0-6"));

    let response = runner.patch(id, &token, 6, b"world").await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&response, "range"), Some("0-11"));

    let response = runner
        .http
        .patch(format!("{}/api/v4/jobs/{id}/trace", server.url()))
        .header("JOB-TOKEN", &token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::BAD_REQUEST,
        "no Content-Range"
    );

    assert_eq!(control.trace(id).await.unwrap(), b"hello world");
    let view = control.job(id).await.unwrap();
    assert_eq!(view.trace_bytes, 11);
    assert_eq!(
        view.trace_crc32,
        format!("crc32:{:08x}", crc32fast::hash(b"hello world"))
    );
}

#[tokio::test]
async fn trace_over_the_limit_fails_the_job() {
    let (server, control) = server(|c| c.trace_limit = 8).await;
    control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    let (id, token) = (job_id(&payload), job_token(&payload));
    assert_eq!(
        runner.patch(id, &token, 0, b"12345").await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        runner.patch(id, &token, 5, b"6789").await.status(),
        StatusCode::FORBIDDEN
    );
    let view = control.job(id).await.unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("trace_size_exceeded"));
}

#[tokio::test]
async fn without_the_feature_flag_a_two_phase_runner_gets_a_running_job() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&["two_phase_job_commit"]));
    let payload = runner.take_job().await;
    assert_eq!(
        control.job(job.id).await.unwrap().status,
        JobStatus::Running
    );
    let token = job_token(&payload);
    let response = runner.put_state(job.id, &token, "pending").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "not waiting");
    assert_eq!(header(&response, "job-status"), Some("running"));
}

#[tokio::test]
async fn two_phase_job_is_failed_and_retried_as_a_new_job_after_the_window() {
    let (server, control) = server(|c| {
        c.two_phase_commit = true;
        c.ack_window = Duration::from_millis(1500);
    })
    .await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&["two_phase_job_commit"]));

    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), job.id);
    assert_eq!(
        control.job(job.id).await.unwrap().status,
        JobStatus::WaitingForAck
    );

    // Queue empty now: 204 with the current value, then a held request.
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
    // Nobody acknowledges: the retry (a new job) changes the queue and wakes the request.
    let held = runner.request().await;
    assert_eq!(held.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&held, "x-gitlab-last-update"), None);
    let failed = control.wait_final(job.id, PROMPT).await.unwrap();
    assert_eq!(
        failed.failure_reason.as_deref(),
        Some("runner_provisioning_timeout")
    );
    let retry = failed
        .retried_as
        .expect("GitLab's auto-retry made a new job");
    let late = runner
        .put_state(job.id, &job_token(&payload), "running")
        .await;
    assert_eq!(late.status(), StatusCode::FORBIDDEN, "the old job is over");
    assert_eq!(header(&late, "job-status"), Some("failed"));

    // The retry is handed out under its own id and token; acknowledged after a keep-alive.
    let payload = runner.take_job().await;
    assert_eq!(job_id(&payload), retry);
    let token = job_token(&payload);
    assert_ne!(token, job.token);
    let response = runner.put_state(retry, &token, "pending").await;
    assert_eq!(response.status(), StatusCode::OK, "keep-alive");
    assert_eq!(header(&response, "job-status"), Some("pending"));
    let response = runner.put_state(retry, &token, "success").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&response, "job-status"), Some("pending"));
    let response = runner.put_state(retry, &token, "running").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status"), Some("running"));

    let view = control.wait_running(retry, PROMPT).await.unwrap();
    assert_eq!(view.retry_of, Some(job.id));
    assert_eq!(view.handouts, 1);
}

#[tokio::test]
async fn a_running_job_is_failed_after_its_timeout_and_the_margin() {
    let (server, control) = server(|c| c.running_timeout_margin = Duration::from_millis(200)).await;
    let spec = JobSpec {
        timeout: 1,
        ..JobSpec::new(RUNNER_TOKEN, &["sleep 100"])
    };
    let job = control.enqueue(&spec).await.unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    let payload = runner.take_job().await;
    let view = control.wait_final(job.id, PROMPT).await.unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(
        view.failure_reason.as_deref(),
        Some("server_timeout_running")
    );
    let response = runner
        .put_state(job.id, &job_token(&payload), "running")
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&response, "job-status"), Some("failed"));
}

#[tokio::test]
async fn graceful_cancel_goes_through_canceling_to_canceled() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["sleep 100"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&["cancel_gracefully"]));
    runner.take_job().await;
    runner.put_state(job.id, &job.token, "running").await;

    assert_eq!(control.cancel(job.id).await.unwrap(), JobStatus::Canceling);
    let response = runner
        .patch(job.id, &job.token, 0, b"after_script runs\n")
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&response, "job-status"), Some("canceling"));
    let response = runner.put_state(job.id, &job.token, "running").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status"), Some("canceling"));

    let response = runner
        .put(
            job.id,
            &job.token,
            json!({"state": "failed", "failure_reason": "unknown_failure"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status"), Some("canceled"));
    let view = control.job(job.id).await.unwrap();
    assert_eq!(view.status, JobStatus::Canceled);
    assert_eq!(view.failure_reason, None);
}

#[tokio::test]
async fn cancel_without_graceful_support_aborts_at_once() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["sleep 100"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    runner.take_job().await;

    assert_eq!(control.cancel(job.id).await.unwrap(), JobStatus::Canceled);
    let response = runner.patch(job.id, &job.token, 0, b"x").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&response, "job-status"), Some("canceled"));
    let response = runner.put_state(job.id, &job.token, "running").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&response, "job-status"), Some("canceled"));

    // A pending job is canceled directly; a finished one stays as it is.
    let pending = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    assert_eq!(
        control.cancel(pending.id).await.unwrap(),
        JobStatus::Canceled
    );
    assert_eq!(
        control.cancel(pending.id).await.unwrap(),
        JobStatus::Canceled
    );
}

#[tokio::test]
async fn wait_final_is_woken_by_the_final_put_and_times_out_with_the_view() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();

    match control
        .wait_running(job.id, Duration::from_millis(50))
        .await
    {
        Err(ClientError::WaitTimedOut { view, .. }) => {
            assert_eq!(view.status, JobStatus::Pending);
        }
        other => panic!("expected a 408, got {other:?}"),
    }
    let message = control
        .wait_final(job.id, Duration::from_millis(50))
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("\"status\":\"pending\""), "{message}");

    let waiter = {
        let control = control.clone();
        tokio::spawn(async move { control.wait_final(job.id, Duration::from_secs(60)).await })
    };
    let mut runner = Runner::new(&server, features(&[]));
    runner.take_job().await;
    runner.put_state(job.id, &job.token, "running").await;
    let response = runner.put_state(job.id, &job.token, "success").await;
    assert_eq!(response.status(), StatusCode::OK);

    let view = tokio::time::timeout(PROMPT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(view.status, JobStatus::Success);
    assert_eq!(view.failure_reason, None);
}
