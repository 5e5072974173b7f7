//! The mirrored API takes what GitLab takes (runner-protocol.md §1, §5, §13): form and
//! multipart bodies, query parameters, trailing slashes, trace ranges whose end GitLab ignores,
//! and any relayed call as the acceptance of a job; and still opens a job only to its token.

use super::*;

const FORM: &str = "application/x-www-form-urlencoded";

fn form(method: &str, path: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", FORM)
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn form_encoded_registration_and_unregistration() {
    let h = harness();
    // What gitlab-python-runner sends: a form, `tag_list` twice, a Python boolean.
    let a = h
        .call(form(
            "POST",
            "/api/v4/runners/",
            "token=reg-a&description=py&run_untagged=False&tag_list=a&tag_list=b",
        ))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.json());
    let token = a.json()["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("glrt-"));
    let verify = h
        .call(
            Request::post(format!("/api/v4/runners/verify?token={token}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(verify.status, StatusCode::OK);
    let job_request = h
        .call(form(
            "POST",
            "/api/v4/jobs/request",
            &format!("token={token}"),
        ))
        .await;
    assert_eq!(job_request.status, StatusCode::NO_CONTENT);
    let gone = h
        .call(form("DELETE", "/api/v4/runners", &format!("token={token}")))
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    let verify = h
        .call(form(
            "POST",
            "/api/v4/runners/verify",
            &format!("token={token}"),
        ))
        .await;
    assert_eq!(verify.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn registration_refusals_are_grapes() {
    let h = harness();
    let info_array = h
        .call(post_json(
            "/api/v4/runners",
            &json!({"token": "reg-a", "info": ["x"]}),
        ))
        .await;
    assert_eq!(info_array.status, StatusCode::BAD_REQUEST);
    assert_eq!(info_array.json(), json!({"error": "info is invalid"}));
    let bad_bool = h
        .call(form("POST", "/api/v4/runners", "token=reg-a&locked=maybe"))
        .await;
    assert_eq!(bad_bool.status, StatusCode::BAD_REQUEST);
    let missing = h
        .call(form("POST", "/api/v4/runners", "description=x"))
        .await;
    assert_eq!(missing.json(), json!({"error": "token is missing"}));
    let multipart = Request::post("/api/v4/runners")
        .header("content-type", "multipart/form-data; boundary=B")
        .body(Body::from(
            "--B\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\nreg-b\r\n--B--\r\n",
        ))
        .unwrap();
    assert_eq!(h.call(multipart).await.status, StatusCode::CREATED);
}

/// Inclusive, exclusive-end and empty ranges are relayed with their bytes and headers as they
/// came, and GitLab's answer comes back unchanged.
#[tokio::test]
async fn trace_ranges_are_relayed_as_gitlab_takes_them() {
    let h = harness();
    h.queue_job("a", 200, json!([])).await;
    let cases: [(&str, &'static [u8], &str); 4] = [
        ("0-4", b"hello", "0-5"),
        ("5-11", b" world", "0-11"),
        ("11-10", b"", "0-11"),
        ("11", b"", "0-11"),
    ];
    for (range, body, stored) in cases {
        h.upstream.answer(Ok(Scripted::new(202)
            .header("range", stored)
            .header("job-status", "running")));
        let a = h.call(patch_trace(200, "glcbt-job200", range, body)).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{range}");
        assert_eq!(a.headers["range"], stored);
        let calls = h.upstream.calls();
        let call = calls.last().unwrap();
        assert_eq!(call.headers["content-range"], range);
        assert_eq!(call.body.as_ref(), body);
    }
    // GitLab would answer 416 (start and end both off): answered here, with the length.
    let stale = h.call(patch_trace(200, "glcbt-job200", "3-3", b"x")).await;
    assert_eq!(stale.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(stale.headers["range"], "0-11");
    assert_eq!(h.upstream.calls().len(), 4);
    // The token as a query parameter, a header spelt another way.
    h.upstream
        .answer(Ok(Scripted::new(202).header("range", "0-12")));
    let by_query = Request::patch("/api/v4/jobs/200/trace?token=glcbt-job200")
        .header("Content-Range", "11-12")
        .body(Body::from("!"))
        .unwrap();
    assert_eq!(h.call(by_query).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn updates_in_any_encoding_are_relayed_verbatim() {
    let h = harness();
    h.queue_job("a", 210, json!([])).await;
    h.upstream
        .answer(Ok(Scripted::new(200).header("job-status", "failed")));
    let body = "token=glcbt-job210&state=failed&failure_reason=script_failure";
    let a = h.call(form("PUT", "/api/v4/jobs/210/?x=1", body)).await;
    assert_eq!(a.status, StatusCode::OK);
    let call = &h.upstream.calls()[0];
    assert_eq!(call.body.as_ref(), body.as_bytes());
    assert_eq!(call.headers["content-type"], FORM);
    assert_eq!(call.query.as_deref(), Some("x=1"));
    assert!(h.app.jobs.phase(JobId(210)).unwrap().is_finished());
    // No token at all: Grape's 400, and GitLab never hears of it.
    let none = h
        .call(form("PUT", "/api/v4/jobs/210", "state=failed"))
        .await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST);
    assert_eq!(h.upstream.calls().len(), 1);
}

/// Leniency never widens access: a job token in the query or a form opens only its own job.
#[tokio::test]
async fn a_token_from_anywhere_still_opens_only_its_job() {
    let h = harness();
    h.queue_job("a", 220, json!([])).await;
    h.queue_job("a", 221, json!([])).await;
    let wrong_query = Request::patch("/api/v4/jobs/220/trace?token=glcbt-job221")
        .header("content-range", "0-0")
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(h.call(wrong_query).await.status, StatusCode::FORBIDDEN);
    let wrong_form = form(
        "PUT",
        "/api/v4/jobs/220",
        "token=glcbt-job221&state=running",
    );
    assert_eq!(h.call(wrong_form).await.status, StatusCode::FORBIDDEN);
    let wrong_upload = Request::post("/api/v4/jobs/220/artifacts?job_token=glcbt-job221")
        .header("content-type", "multipart/form-data; boundary=XYZ")
        .body(Body::from("--XYZ--\r\n"))
        .unwrap();
    assert_eq!(h.call(wrong_upload).await.status, StatusCode::FORBIDDEN);
    assert!(h.upstream.calls().is_empty());
    assert_eq!(h.app.jobs.phase(JobId(220)), Some(JobPhase::Queued));
}

/// A runner that never sends `PUT state=running`: its first trace patch is its acceptance, and
/// the acknowledgement window no longer sends the job back to the queue.
#[tokio::test]
async fn the_first_relayed_call_is_the_acceptance() {
    let h = harness();
    let token = h.register("reg-a").await;
    h.queue_job("a", 230, json!([])).await;
    let a = h.call(job_request(&token)).await;
    assert_eq!(a.status, StatusCode::CREATED);
    let Some(JobPhase::Assigned { sidecar, .. }) = h.app.jobs.phase(JobId(230)) else {
        panic!("not assigned: {:?}", h.app.jobs.phase(JobId(230)));
    };
    h.upstream
        .answer(Ok(Scripted::new(202).header("range", "0-3")));
    let trace = Request::patch("/api/v4/jobs/230/trace")
        .header("Job-Token", "glcbt-job230")
        .header("Content-Range", "0-3")
        .body(Body::from("abc"))
        .unwrap();
    assert_eq!(h.call(trace).await.status, StatusCode::ACCEPTED);
    assert!(matches!(
        h.app.jobs.phase(JobId(230)),
        Some(JobPhase::Running { sidecar: Some(s), .. }) if s == sidecar
    ));
    assert!(h.app.jobs.unacknowledged("a", 0).is_empty());
}
