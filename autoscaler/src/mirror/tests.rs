//! The mirrored API in process, against a scripted GitLab: status codes, refusals that never
//! reach GitLab, pool isolation.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::clock::SystemClock;
use crate::config::PoolConfig;
use crate::core::JobId;
use crate::core::job::JobPhase;
use crate::secret::Secret;
use crate::store::MemoryStore;
use crate::upstream::fake::{FakeUpstream, Scripted};

mod delivery;
mod fidelity;
mod hostile;
mod parsers;
mod relay;
mod spec;

const UPSTREAM_TOKEN_A: &str = "glrt-UPSTREAM-A-never-leaves";
const UPSTREAM_TOKEN_B: &str = "glrt-UPSTREAM-B-never-leaves";

struct Harness {
    app: Arc<App>,
    upstream: Arc<FakeUpstream>,
}

fn pool_config(name: &str, upstream: &str, registration: &str) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        upstream_token: Secret::new(upstream),
        registration_token: Some(Secret::new(registration)),
        request_concurrency: 2,
        assign_ack_timeout: Duration::from_secs(120),
        provisioner: None,
        sources: Vec::new(),
        classes: None,
        scaling: crate::config::ScalingConfig::default(),
        policies: Vec::new(),
        sidecar: None,
    }
}

fn harness() -> Harness {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(SystemClock);
    let jobs = Arc::new(Jobs::load(store.clone(), clock.clone()).unwrap());
    let sidecars = Arc::new(Sidecars::load(store.clone(), clock).unwrap());
    let pools = vec![
        Pool::open(
            pool_config("a", UPSTREAM_TOKEN_A, "reg-a"),
            jobs.clone(),
            store.as_ref(),
        )
        .unwrap(),
        Pool::open(
            pool_config("b", UPSTREAM_TOKEN_B, "reg-b"),
            jobs.clone(),
            store.as_ref(),
        )
        .unwrap(),
    ];
    let upstream = Arc::new(FakeUpstream::default());
    let limits = Limits {
        long_poll: Duration::from_millis(200),
        job_request_bytes: 32 * 1024,
        update_bytes: 1 << 20,
        trace_patch_bytes: 1 << 20,
        call_timeout: Duration::from_secs(5),
        artifact_timeout: Duration::from_secs(5),
        job_requests_per_sidecar: 2,
    };
    let delivery = crate::delivery::Delivery::new(
        upstream.clone(),
        jobs.clone(),
        Arc::new(SystemClock),
        std::env::temp_dir().join(format!("autoscaler-spool-{}", std::process::id())),
        std::time::Duration::from_secs(30),
    );
    let app = Arc::new(App::new(
        pools,
        jobs,
        sidecars,
        upstream.clone(),
        delivery,
        limits,
    ));
    Harness { app, upstream }
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

impl Harness {
    async fn call(&self, request: Request<Body>) -> Answer {
        let response = router(self.app.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn register(&self, registration_token: &str) -> String {
        let a = self
            .call(post_json(
                "/api/v4/runners",
                &json!({"token": registration_token, "description": "t"}),
            ))
            .await;
        assert_eq!(a.status, StatusCode::CREATED);
        a.json()["token"].as_str().unwrap().to_string()
    }

    async fn queue_job(&self, pool: &str, id: u64, deps: Value) -> Vec<u8> {
        let payload = serde_json::to_vec(&json!({
            "id": id, "token": format!("glcbt-job{id}"), "job_info": {"project_id": 1},
            "dependencies": deps, "variables": [{"key": "X", "value": "é ✓"}]
        }))
        .unwrap();
        self.app.jobs.accept(pool, &payload).unwrap();
        // As if a sidecar's acceptance had reached GitLab; tests of the acknowledgement undo it.
        self.app.jobs.set_acknowledged(JobId(id), true).unwrap();
        self.app.pools[pool].queue.offer(JobId(id));
        payload
    }
}

fn post_json(path: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn job_request(token: &str) -> Request<Body> {
    post_json(
        "/api/v4/jobs/request",
        &json!({"token": token, "info": {"features": {"artifacts": true}}}),
    )
}

fn put_job(id: u64, token: &str, state: &str) -> Request<Body> {
    Request::put(format!("/api/v4/jobs/{id}"))
        .header("content-type", "application/json")
        .header("job-token", token)
        .header("runner-token", "glrt-should-be-stripped")
        .body(Body::from(format!(
            r#"{{"token":"{token}","state":"{state}"}}"#
        )))
        .unwrap()
}

fn patch_trace(id: u64, token: &str, range: &str, body: &'static [u8]) -> Request<Body> {
    Request::patch(format!("/api/v4/jobs/{id}/trace?debug_trace=false"))
        .header("job-token", token)
        .header("content-range", range)
        .header("content-type", "text/plain")
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn registration_needs_a_pools_registration_token() {
    let h = harness();
    let token = h.register("reg-a").await;
    assert!(token.starts_with("glrt-"));
    let wrong = h
        .call(post_json("/api/v4/runners", &json!({"token": "nope"})))
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let missing = h.call(post_json("/api/v4/runners", &json!({}))).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.json(), json!({"error": "token is missing"}));
    let verify = h
        .call(post_json(
            "/api/v4/runners/verify",
            &json!({"token": token}),
        ))
        .await;
    assert_eq!(verify.status, StatusCode::OK);
    assert_eq!(verify.json()["token_expires_at"], Value::Null);
    let unregister = h
        .call(
            Request::delete("/api/v4/runners")
                .body(Body::from(json!({"token": token}).to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(unregister.status, StatusCode::NO_CONTENT);
    let verify = h
        .call(post_json(
            "/api/v4/runners/verify",
            &json!({"token": token}),
        ))
        .await;
    assert_eq!(verify.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn router_discovery_is_not_implemented() {
    let h = harness();
    let a = h
        .call(
            Request::get("/api/v4/runners/router/discovery")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(a.status, StatusCode::NOT_IMPLEMENTED);
}

#[tokio::test]
async fn job_request_bad_input_gets_gitlabs_status() {
    let h = harness();
    let token = h.register("reg-a").await;
    let malformed = h
        .call(
            Request::post("/api/v4/jobs/request")
                .body(Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    let huge = json!({"token": token, "info": {"pad": "x".repeat(33 * 1024)}});
    assert_eq!(
        h.call(post_json("/api/v4/jobs/request", &huge))
            .await
            .status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        h.call(post_json("/api/v4/jobs/request", &json!({})))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        h.call(job_request("glrt-unknown")).await.status,
        StatusCode::FORBIDDEN
    );
    // The header form of the token works as well as the body form.
    let by_header = Request::post("/api/v4/jobs/request")
        .header("runner-token", &token)
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(h.call(by_header).await.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_queued_job_is_handed_out_byte_for_byte_as_json_201() {
    let h = harness();
    let token = h.register("reg-a").await;
    let payload = h.queue_job("a", 41, json!([])).await;
    let a = h.call(job_request(&token)).await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(a.headers["content-type"], "application/json");
    assert_eq!(a.body, payload);
    assert!(matches!(
        h.app.jobs.phase(JobId(41)),
        Some(JobPhase::Assigned { .. })
    ));
    // Nothing left: the next request is held, then answered 204.
    assert_eq!(
        h.call(job_request(&token)).await.status,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn a_retried_job_request_gets_the_same_job() {
    let h = harness();
    let token = h.register("reg-a").await;
    h.queue_job("a", 41, json!([])).await;
    h.queue_job("a", 42, json!([])).await;
    let with_id = || {
        let mut r = job_request(&token);
        r.headers_mut().insert(
            "x-request-id",
            "0123456789abcdef0123456789abcdef".parse().unwrap(),
        );
        r
    };
    let first = h.call(with_id()).await;
    let retry = h.call(with_id()).await;
    assert_eq!(first.body, retry.body);
    assert_eq!(first.json()["id"], 41);
    assert_eq!(h.call(job_request(&token)).await.json()["id"], 42);
}

#[tokio::test]
async fn a_sidecar_never_sees_another_pools_jobs() {
    let h = harness();
    let token_a = h.register("reg-a").await;
    let token_b = h.register("reg-b").await;
    h.queue_job("b", 50, json!([])).await;
    assert_eq!(
        h.call(job_request(&token_a)).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(h.app.jobs.phase(JobId(50)), Some(JobPhase::Queued));
    assert_eq!(h.call(job_request(&token_b)).await.json()["id"], 50);
}

#[tokio::test]
async fn job_calls_with_the_wrong_token_or_job_never_reach_gitlab() {
    let h = harness();
    h.queue_job("a", 60, json!([])).await;
    h.queue_job("b", 61, json!([])).await;
    // Another job's token, an unknown job, no token at all, malformed and oversized bodies.
    assert_eq!(
        h.call(put_job(60, "glcbt-job61", "running")).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        h.call(put_job(99, "glcbt-job99", "running")).await.status,
        StatusCode::FORBIDDEN,
        "GitLab answers 403 for a job its token does not open, known or not"
    );
    let no_token = Request::put("/api/v4/jobs/60")
        .body(Body::from(r#"{"state":"running"}"#))
        .unwrap();
    // Grape: `token` is required on PUT.
    assert_eq!(h.call(no_token).await.status, StatusCode::BAD_REQUEST);
    let malformed = Request::put("/api/v4/jobs/60")
        .header("job-token", "glcbt-job60")
        .body(Body::from("{"))
        .unwrap();
    assert_eq!(h.call(malformed).await.status, StatusCode::BAD_REQUEST);
    let big = Request::put("/api/v4/jobs/60")
        .header("job-token", "glcbt-job60")
        .body(Body::from(vec![b' '; (1 << 20) + 1]))
        .unwrap();
    assert_eq!(h.call(big).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        h.call(patch_trace(60, "glcbt-job61", "0-1", b"ab"))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let download = Request::get("/api/v4/jobs/61/artifacts")
        .header("job-token", "glcbt-job60")
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.call(download).await.status, StatusCode::FORBIDDEN);
    let not_a_job = Request::get("/api/v4/jobs/abc/artifacts")
        .header("job-token", "x")
        .body(Body::empty())
        .unwrap();
    // GitLab declares `:id` an Integer: anything else is a validation error.
    assert_eq!(h.call(not_a_job).await.status, StatusCode::BAD_REQUEST);
    assert!(
        h.upstream.calls().is_empty(),
        "refused calls reached GitLab"
    );
    assert_eq!(
        h.app.jobs.phase(JobId(60)),
        Some(JobPhase::Queued),
        "refused calls changed state"
    );
}
