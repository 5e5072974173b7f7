//! What the relay passes on to GitLab for a sidecar's job calls (updates, trace, artifacts both
//! ways) and what it never passes.

use super::*;

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
    assert!(!h.app.jobs.get(JobId(70)).unwrap().failed);
}

/// A job that ends as failed, or that GitLab ends under its sidecar (canceled: `403`), is
/// recorded as failed, so the pipeline forecast holds nothing for the stages GitLab skips.
#[tokio::test]
async fn a_failed_or_canceled_job_is_recorded_as_failed() {
    let h = harness();
    h.queue_job("a", 72, json!([])).await;
    h.queue_job("a", 73, json!([])).await;
    h.upstream.answer(Ok(Scripted::new(200)));
    h.call(put_job(72, "glcbt-job72", "running")).await;
    h.upstream.answer(Ok(Scripted::new(200)));
    h.call(put_job(73, "glcbt-job73", "running")).await;
    h.upstream
        .answer(Ok(Scripted::new(200).header("job-status", "failed")));
    assert_eq!(
        h.call(put_job(72, "glcbt-job72", "failed")).await.status,
        StatusCode::OK
    );
    h.upstream
        .answer(Ok(Scripted::new(403).header("job-status", "canceled")));
    h.call(put_job(73, "glcbt-job73", "running")).await;
    for id in [72, 73] {
        let record = h.app.jobs.get(JobId(id)).unwrap();
        assert!(record.phase.is_finished() && record.failed, "{record:?}");
    }
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
