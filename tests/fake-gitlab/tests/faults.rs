//! Fault injection on `/api/v4/*` and the request counters.

mod common;

use std::time::{Duration, Instant};

use common::{RUNNER_TOKEN, Runner, features, header, server};
use fake_gitlab::control::{FaultAction, FaultRule, JobSpec};
use reqwest::StatusCode;

const REQUEST_ROUTE: &str = "POST /api/v4/jobs/request";

#[tokio::test]
async fn status_fault_with_retry_after_on_matching_requests_only() {
    let (server, control) = server(|_| {}).await;
    let job = control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let mut runner = Runner::new(&server, features(&[]));
    runner.take_job().await;
    control
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 502,
                retry_after: Some(7),
            })
            .methods(&["PATCH"])
            .path_prefix("/api/v4/jobs"),
        )
        .await
        .unwrap();

    let response = runner.patch(job.id, &job.token, 0, b"hi").await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(header(&response, "retry-after"), Some("7"));
    assert_eq!(
        control.job(job.id).await.unwrap().trace_bytes,
        0,
        "handler not run"
    );
    assert_eq!(
        runner
            .put_state(job.id, &job.token, "running")
            .await
            .status(),
        StatusCode::OK
    );

    control.clear_faults().await.unwrap();
    assert_eq!(
        runner.patch(job.id, &job.token, 0, b"hi").await.status(),
        StatusCode::ACCEPTED
    );

    let stats = control.stats().await.unwrap();
    assert_eq!(stats.count("PATCH /api/v4/jobs/:id/trace", "502"), 1);
    assert_eq!(stats.count("PATCH /api/v4/jobs/:id/trace", "202"), 1);
    assert_eq!(stats.count("PUT /api/v4/jobs/:id", "200"), 1);
    assert_eq!(stats.count(REQUEST_ROUTE, "201"), 1);
    assert_eq!(stats.faults_injected, 1);
}

#[tokio::test]
async fn drop_fault_closes_the_connection_without_a_response() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    let id = control
        .add_fault(&FaultRule::new(FaultAction::Drop).count(1))
        .await
        .unwrap();
    assert!(id > 0);

    let error = runner
        .http
        .post(format!("{}/api/v4/jobs/request", server.url()))
        .json(&runner.body())
        .send()
        .await
        .expect_err("a transport error, not an HTTP status");
    assert!(error.status().is_none(), "{error:?}");
    assert!(
        error.is_request() || error.is_connect() || error.is_body(),
        "{error:?}"
    );

    // `count: 1` is spent: the next request is answered.
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
    let stats = control.stats().await.unwrap();
    assert_eq!(stats.count(REQUEST_ROUTE, "dropped"), 1);
    assert_eq!(stats.count(REQUEST_ROUTE, "204"), 1);
    assert_eq!(stats.faults_injected, 1);
}

#[tokio::test]
async fn delay_fault_answers_normally_later() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    control
        .add_fault(
            &FaultRule::new(FaultAction::Delay { ms: 300 }).path_prefix("/api/v4/jobs/request"),
        )
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(control.stats().await.unwrap().faults_injected, 1);
}

#[tokio::test]
async fn fault_expires_after_its_duration_and_can_be_deleted() {
    // No long polling: every request below is answered at once.
    let (server, control) = server(|c| c.long_poll = Duration::ZERO).await;
    let mut runner = Runner::new(&server, features(&[]));
    control
        .add_fault(
            &FaultRule::new(FaultAction::Status {
                status: 503,
                retry_after: None,
            })
            .duration(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let response = runner.request().await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "retry-after"), None);

    // Time has to pass for a duration to expire; this sleep is the thing under test.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);

    let forever = control
        .add_fault(&FaultRule::new(FaultAction::Status {
            status: 500,
            retry_after: None,
        }))
        .await
        .unwrap();
    assert_eq!(
        runner.request().await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // The control API is never affected by faults.
    assert!(control.jobs().await.unwrap().is_empty());
    control.remove_fault(forever).await.unwrap();
    assert_eq!(runner.request().await.status(), StatusCode::NO_CONTENT);
}
