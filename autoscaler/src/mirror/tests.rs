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

mod fidelity;
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

#[tokio::test]
async fn updates_are_relayed_verbatim_with_gitlabs_answer() {
    let h = harness();
    h.queue_job("a", 70, json!([])).await;
    h.upstream.answer(Ok(Scripted::new(200)
        .header("job-status", "running")
        .header("x-gitlab-trace-update-interval", "3")
        .header("set-cookie", "secret=1")));
    let a = h.call(put_job(70, "glcbt-job70", "running")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["job-status"], "running");
    assert_eq!(a.headers["x-gitlab-trace-update-interval"], "3");
    assert!(!a.headers.contains_key("set-cookie"));
    assert!(matches!(
        h.app.jobs.phase(JobId(70)),
        Some(JobPhase::Running { .. })
    ));
    let call = &h.upstream.calls()[0];
    assert_eq!(call.path, "/api/v4/jobs/70");
    assert_eq!(
        call.body.as_ref(),
        br#"{"token":"glcbt-job70","state":"running"}"#
    );
    assert!(
        !call.headers.contains_key("runner-token"),
        "runner token crossed the relay"
    );

    // A final update answered 202 is not the end; 200 is.
    h.upstream.answer(Ok(
        Scripted::new(202).header("x-gitlab-trace-update-interval", "1")
    ));
    assert_eq!(
        h.call(put_job(70, "glcbt-job70", "success")).await.status,
        StatusCode::ACCEPTED
    );
    assert!(matches!(
        h.app.jobs.phase(JobId(70)),
        Some(JobPhase::Running { .. })
    ));
    h.upstream
        .answer(Ok(Scripted::new(200).header("job-status", "success")));
    assert_eq!(
        h.call(put_job(70, "glcbt-job70", "success")).await.status,
        StatusCode::OK
    );
    assert!(matches!(
        h.app.jobs.phase(JobId(70)),
        Some(JobPhase::Finished { .. })
    ));
}

#[tokio::test]
async fn gitlab_unreachable_is_a_502_and_the_job_is_kept() {
    let h = harness();
    h.queue_job("a", 71, json!([])).await;
    h.upstream.answer(Err("connection refused".into()));
    let a = h.call(put_job(71, "glcbt-job71", "success")).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    assert!(!h.app.jobs.phase(JobId(71)).unwrap().is_finished());
}

#[tokio::test]
async fn trace_patches_are_checked_then_relayed() {
    let h = harness();
    h.queue_job("a", 80, json!([])).await;
    let no_range = Request::patch("/api/v4/jobs/80/trace")
        .header("job-token", "glcbt-job80")
        .body(Body::from("ab"))
        .unwrap();
    // Only a missing Content-Range is refused; its end is GitLab's to ignore (fidelity.rs).
    assert_eq!(h.call(no_range).await.status, StatusCode::BAD_REQUEST);
    assert!(h.upstream.calls().is_empty());

    h.upstream.answer(Ok(Scripted::new(202)
        .header("range", "0-2")
        .header("job-status", "running")));
    let a = h.call(patch_trace(80, "glcbt-job80", "0-1", b"ab")).await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    assert_eq!(a.headers["range"], "0-2");
    let call = &h.upstream.calls()[0];
    assert_eq!(call.query.as_deref(), Some("debug_trace=false"));
    assert_eq!(call.headers["content-range"], "0-1");
    assert_eq!(call.body.as_ref(), b"ab");

    // GitLab holds 2 bytes: a patch starting elsewhere (and not repeating the tail) is answered
    // 416 with the length, locally.
    let stale = h.call(patch_trace(80, "glcbt-job80", "0-0", b"a")).await;
    assert_eq!(stale.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(stale.headers["range"], "0-2");
    assert_eq!(h.upstream.calls().len(), 1);
}

#[tokio::test]
async fn dependencies_download_through_the_relay_only_when_declared() {
    let h = harness();
    h.queue_job(
        "a",
        90,
        json!([{"id": 89, "name": "build", "token": "glcbt-job90"}]),
    )
    .await;
    h.upstream.answer(Ok(Scripted::new(200)
        .header("content-type", "application/zip")
        .body(&b"PK\x03\x04zip"[..])));
    let ok = Request::get("/api/v4/jobs/89/artifacts?direct_download=true")
        .header("job-token", "glcbt-job90")
        .body(Body::empty())
        .unwrap();
    let a = h.call(ok).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body, b"PK\x03\x04zip");
    assert_eq!(
        h.upstream.calls()[0].query.as_deref(),
        Some("direct_download=true")
    );
    let undeclared = Request::get("/api/v4/jobs/88/artifacts")
        .header("job-token", "glcbt-job90")
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.call(undeclared).await.status, StatusCode::FORBIDDEN);
    assert_eq!(h.upstream.calls().len(), 1);
}

#[tokio::test]
async fn artifacts_upload_streams_the_body_through() {
    let h = harness();
    h.queue_job("a", 95, json!([])).await;
    h.upstream.answer(Ok(Scripted::new(201).body("{}")));
    let upload =
        Request::post("/api/v4/jobs/95/artifacts?artifact_format=zip&artifact_type=archive")
            .header("job-token", "glcbt-job95")
            .header("content-type", "multipart/form-data; boundary=XYZ")
            .body(Body::from("--XYZ\r\ncontent\r\n--XYZ--\r\n"))
            .unwrap();
    assert_eq!(h.call(upload).await.status, StatusCode::CREATED);
    let call = &h.upstream.calls()[0];
    assert_eq!(
        call.headers["content-type"],
        "multipart/form-data; boundary=XYZ"
    );
    assert_eq!(call.body.as_ref(), b"--XYZ\r\ncontent\r\n--XYZ--\r\n");
}

#[tokio::test]
async fn nothing_a_sidecar_receives_contains_an_upstream_token() {
    let h = harness();
    let token = h.register("reg-a").await;
    h.queue_job("a", 100, json!([])).await;
    let mut seen = Vec::new();
    for request in [
        job_request(&token),
        post_json("/api/v4/runners/verify", &json!({"token": token})),
        put_job(100, "glcbt-job100", "running"),
        job_request("glrt-wrong"),
    ] {
        let a = h.call(request).await;
        seen.extend(a.body);
        for (name, value) in &a.headers {
            seen.extend(name.as_str().as_bytes());
            seen.extend(value.as_bytes());
        }
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(!seen.contains(UPSTREAM_TOKEN_A) && !seen.contains(UPSTREAM_TOKEN_B));
}

#[tokio::test]
async fn an_acceptance_gitlab_missed_is_delivered_before_anything_else() {
    let h = harness();
    h.queue_job("a", 110, json!([])).await;
    h.app.jobs.set_acknowledged(JobId(110), false).unwrap();
    // GitLab is down when the sidecar accepts the job: the runner gets the 502 and runs anyway.
    h.upstream.answer(Ok(Scripted::new(502)));
    assert_eq!(
        h.call(put_job(110, "glcbt-job110", "running")).await.status,
        StatusCode::BAD_GATEWAY
    );
    // Still down: the trace patch is not sent before the acceptance, and the runner retries.
    h.upstream.answer(Ok(Scripted::new(502)));
    assert_eq!(
        h.call(patch_trace(110, "glcbt-job110", "0-1", b"ab"))
            .await
            .status,
        StatusCode::BAD_GATEWAY
    );
    // Back: the acceptance goes first, then the patch.
    h.upstream
        .answer(Ok(Scripted::new(200).header("job-status", "running")));
    h.upstream
        .answer(Ok(Scripted::new(202).header("range", "0-2")));
    assert_eq!(
        h.call(patch_trace(110, "glcbt-job110", "0-1", b"ab"))
            .await
            .status,
        StatusCode::ACCEPTED
    );
    let calls = h.upstream.calls();
    let sequence: Vec<(&str, Value)> = calls
        .iter()
        .map(|c| {
            (
                c.path.as_str(),
                serde_json::from_slice(&c.body).unwrap_or(Value::Null),
            )
        })
        .collect();
    let acceptance = json!({"token": "glcbt-job110", "state": "running"});
    assert_eq!(
        sequence,
        vec![
            ("/api/v4/jobs/110", acceptance.clone()),
            ("/api/v4/jobs/110", acceptance.clone()),
            ("/api/v4/jobs/110", acceptance),
            ("/api/v4/jobs/110/trace", Value::Null),
        ]
    );
    assert_eq!(calls[3].body.as_ref(), b"ab");
    // Delivered once; later calls go straight through.
    h.upstream.answer(Ok(Scripted::new(200)));
    assert_eq!(
        h.call(put_job(110, "glcbt-job110", "success")).await.status,
        StatusCode::OK
    );
    assert_eq!(h.upstream.calls().len(), 5);
}

fn upload(id: u64, body: &'static str) -> Request<Body> {
    Request::post(format!("/api/v4/jobs/{id}/artifacts?artifact_type=archive"))
        .header("job-token", format!("glcbt-job{id}"))
        .header("content-type", "multipart/form-data; boundary=XYZ")
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn artifacts_taken_while_gitlab_fails_are_kept_and_sent_before_the_final_state() {
    let h = harness();
    h.queue_job("a", 120, json!([])).await;
    h.app.delivery.gitlab_answered(false);
    let body = "--XYZ\r\nartifact bytes\r\n--XYZ--\r\n";
    assert_eq!(h.call(upload(120, body)).await.status, StatusCode::CREATED);
    assert!(
        h.upstream.calls().is_empty(),
        "nothing sent while GitLab fails"
    );
    let spooled = h.app.jobs.get(JobId(120)).unwrap().spooled;
    assert_eq!(spooled.len(), 1);
    assert_eq!(std::fs::read(&spooled[0].file).unwrap(), body.as_bytes());

    // Still failing at the final update: the artifacts cannot go, so neither does the final
    // state; the runner is told to come back (GitLab's own 202), never held inside the call.
    h.upstream.answer(Ok(Scripted::new(503)));
    let early = h.call(put_job(120, "glcbt-job120", "success")).await;
    assert_eq!(early.status, StatusCode::ACCEPTED);
    assert_eq!(early.headers["x-gitlab-trace-update-interval"], "3");
    h.app.delivery.settled(JobId(120)).await;
    assert_eq!(
        h.upstream.calls().len(),
        1,
        "one upload attempt, no final state"
    );
    assert!(
        h.app
            .jobs
            .phase(JobId(120))
            .is_some_and(|p| !p.is_finished())
    );

    // GitLab is back: the upload goes while the runner waits, then the final state.
    h.upstream.answer(Ok(Scripted::new(201)));
    let again = h.call(put_job(120, "glcbt-job120", "success")).await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    h.app.delivery.settled(JobId(120)).await;
    h.upstream.answer(Ok(Scripted::new(200)));
    assert_eq!(
        h.call(put_job(120, "glcbt-job120", "success")).await.status,
        StatusCode::OK
    );
    let calls = h.upstream.calls();
    assert_eq!(calls[1].path, "/api/v4/jobs/120/artifacts");
    assert_eq!(calls[1].query.as_deref(), Some("artifact_type=archive"));
    assert_eq!(
        calls[1].headers["content-type"],
        "multipart/form-data; boundary=XYZ"
    );
    assert_eq!(calls[1].body.as_ref(), body.as_bytes());
    assert_eq!(calls[2].path, "/api/v4/jobs/120");
    assert!(h.app.jobs.get(JobId(120)).unwrap().spooled.is_empty());
    assert!(
        !std::path::Path::new(&spooled[0].file).exists(),
        "the spool file is removed once delivered"
    );
    assert!(h.app.jobs.phase(JobId(120)).unwrap().is_finished());
}

#[tokio::test]
async fn spooled_artifacts_gitlab_refuses_fail_the_job_with_the_reason() {
    let h = harness();
    h.queue_job("a", 121, json!([])).await;
    h.app.delivery.gitlab_answered(false);
    let body = "--XYZ\r\nartifact bytes\r\n--XYZ--\r\n";
    assert_eq!(h.call(upload(121, body)).await.status, StatusCode::CREATED);
    h.app.delivery.gitlab_answered(true);

    h.upstream.answer(Ok(Scripted::new(413)
        .header("content-type", "application/json")
        .body(&br#"{"message":"413 Request Entity Too Large"}"#[..])));
    let early = h.call(put_job(121, "glcbt-job121", "success")).await;
    assert_eq!(early.status, StatusCode::ACCEPTED);
    h.app.delivery.settled(JobId(121)).await;
    let refusal = h.app.jobs.get(JobId(121)).unwrap().artifact_refusal;
    assert_eq!(refusal.as_deref(), Some("413 413 Request Entity Too Large"));

    // The runner reported success; GitLab hears the failure it would have reported itself.
    h.upstream.answer(Ok(Scripted::new(200)));
    assert_eq!(
        h.call(put_job(121, "glcbt-job121", "success")).await.status,
        StatusCode::OK
    );
    let last = h.upstream.calls().pop().unwrap();
    assert_eq!(last.path, "/api/v4/jobs/121");
    let update: Value = serde_json::from_slice(&last.body).unwrap();
    assert_eq!(update["state"], "failed");
    assert_eq!(update["failure_reason"], "script_failure");
}
