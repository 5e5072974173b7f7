//! Delivery when GitLab fails: an acceptance GitLab missed, artifacts taken while it fails,
//! and what becomes of a job whose spooled artifacts GitLab refuses.

use super::*;

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
