//! The fake takes what GitLab takes (runner-protocol.md §1, §2, §5): registration, form and
//! multipart bodies, query parameters, trace ranges whose end is ignored, trailing slashes.
#![allow(clippy::unwrap_used)]

mod common;

use common::{RUNNER_TOKEN, Runner, features, header, http, job_id, job_token, server};
use fake_gitlab::control::{ArtifactSpec, JobSpec, JobStatus};
use reqwest::StatusCode;
use serde_json::{Value, json};

const FORM: &str = "application/x-www-form-urlencoded";

async fn post_form(url: &str, body: &str) -> reqwest::Response {
    http()
        .post(url)
        .header("content-type", FORM)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn registration_with_a_form_as_a_python_runner_sends_it() {
    let (server, control) = server(|c| c.registration_tokens = vec!["GR1348941reg".into()]).await;
    let base = server.url();
    // Repeated plain keys: Rack keeps the last one. `run_untagged=False` is a Grape boolean.
    let response = post_form(
        &format!("{base}/api/v4/runners/"),
        "token=GR1348941reg&description=py&run_untagged=False&tag_list=a&tag_list=b",
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    let token = body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("glrt-"), "{body}");
    assert!(
        body["id"].is_u64() && body["token_expires_at"].is_null(),
        "{body}"
    );
    let view = control
        .runners()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.token == token)
        .unwrap();
    assert_eq!(view.tags, vec!["b"]);
    assert_eq!(view.description.as_deref(), Some("py"));

    // The new token asks for jobs, with a form body too.
    let job = control
        .enqueue(&JobSpec::new(&token, &["true"]))
        .await
        .unwrap();
    let response = post_form(
        &format!("{base}/api/v4/jobs/request"),
        &format!("token={token}"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let payload: Value = response.json().await.unwrap();
    assert_eq!(job_id(&payload), job.id);

    // Unregistration with a form body: 204, then the token is gone.
    let response = http()
        .delete(format!("{base}/api/v4/runners"))
        .header("content-type", FORM)
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let response = post_form(
        &format!("{base}/api/v4/runners/verify"),
        &format!("token={token}"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn registration_refusals_are_grapes() {
    let (server, control) = server(|_| {}).await;
    control.add_registration_token("reg-x").await.unwrap();
    let url = format!("{}/api/v4/runners", server.url());
    let json_post = |body: Value| http().post(&url).json(&body).send();
    let missing = json_post(json!({"description": "x"})).await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        json!({"error": "token is missing"})
    );
    let info_array = json_post(json!({"token": "reg-x", "info": ["a"]}))
        .await
        .unwrap();
    assert_eq!(info_array.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        info_array.json::<Value>().await.unwrap(),
        json!({"error": "info is invalid"})
    );
    let bad_bool = json_post(json!({"token": "reg-x", "locked": "maybe"}))
        .await
        .unwrap();
    assert_eq!(bad_bool.status(), StatusCode::BAD_REQUEST);
    let unknown = json_post(json!({"token": "reg-other"})).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::FORBIDDEN);
    // Multipart, and the token as a query parameter.
    let form = reqwest::multipart::Form::new()
        .text("token", "reg-x")
        .text("tag_list", "a,b");
    let multipart = http().post(&url).multipart(form).send().await.unwrap();
    assert_eq!(multipart.status(), StatusCode::CREATED);
    let query = http()
        .post(format!("{url}?token=reg-x"))
        .send()
        .await
        .unwrap();
    assert_eq!(query.status(), StatusCode::CREATED);
    let tags: Vec<Vec<String>> = control
        .runners()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.tags)
        .collect();
    assert!(
        tags.contains(&vec!["a".to_owned(), "b".to_owned()]),
        "{tags:?}"
    );
}

/// `PATCH` with `Content-Range` as `start-end` (inclusive), `start-(end+1)` (exclusive, runners
/// before 11.3), an empty body, and the token in the query: only the start decides.
#[tokio::test]
async fn trace_ranges_only_the_start_counts() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    control
        .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
        .await
        .unwrap();
    let payload = runner.take_job().await;
    let (id, token) = (job_id(&payload), job_token(&payload));
    let url = format!("{}/api/v4/jobs/{id}/trace", server.url());
    let patch = |range: &str, body: &'static [u8], query_token: bool| {
        let mut request = http().patch(if query_token {
            format!("{url}?token={token}")
        } else {
            url.clone()
        });
        if !query_token {
            request = request.header("Job-Token", &token);
        }
        request
            .header("Content-Range", range)
            .header("Content-Type", "text/plain")
            .body(body)
            .send()
    };
    let cases: [(&str, &'static [u8], bool, u16, &str); 7] = [
        ("0-4", b"hello", false, 202, "0-5"),    // inclusive
        ("5-11", b" world", false, 202, "0-11"), // exclusive end
        ("11-10", b"", false, 202, "0-11"),      // empty patch at the end
        ("11-11", b"!", true, 202, "0-12"),      // token in the query
        ("3-2", b"", false, 416, "0-12"),        // empty patch elsewhere
        ("7-11", b"ld!", false, 416, "0-12"),    // wrong start, wrong end
        ("9-12", b"ld!", false, 202, "0-12"),    // the tail again: Rails answers 202
    ];
    for (range, body, query_token, status, stored) in cases {
        let response = patch(range, body, query_token).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{range}");
        assert_eq!(header(&response, "range"), Some(stored), "{range}");
    }
    let missing = http()
        .patch(&url)
        .header("JOB-TOKEN", &token)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(control.trace(id).await.unwrap(), b"hello world!");
}

/// The final PUT as a Python runner sends it (no exit code, no checksum), a form-encoded one,
/// and one without `token` (Grape: 400 even with the header gone).
#[tokio::test]
async fn updates_in_any_encoding() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    for _ in 0..2 {
        control
            .enqueue(&JobSpec::new(RUNNER_TOKEN, &["true"]))
            .await
            .unwrap();
    }
    let first = runner.take_job().await;
    let second = runner.take_job().await;
    let put = |id: u64| http().put(format!("{}/api/v4/jobs/{id}", server.url()));
    let no_token = put(job_id(&first))
        .json(&json!({"state": "success"}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), StatusCode::BAD_REQUEST);
    let json_final = put(job_id(&first))
        .json(&json!({"info": {"name": "py"}, "token": job_token(&first), "state": "success"}))
        .send()
        .await
        .unwrap();
    assert_eq!(json_final.status(), StatusCode::OK);
    let form_final = put(job_id(&second))
        .header("content-type", FORM)
        .body(format!(
            "token={}&state=failed&failure_reason=script_failure&exit_code=3",
            job_token(&second)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(form_final.status(), StatusCode::OK);
    let view = control.job(job_id(&second)).await.unwrap();
    assert_eq!(view.status, JobStatus::Failed);
    assert_eq!(view.exit_code, Some(3));
    assert_eq!(view.failure_reason.as_deref(), Some("script_failure"));
}

/// `artifact_format` and `artifact_type` as form fields, the way some runners send them.
#[tokio::test]
async fn artifact_parameters_as_form_fields() {
    let (server, control) = server(|_| {}).await;
    let mut runner = Runner::new(&server, features(&[]));
    let mut spec = JobSpec::new(RUNNER_TOKEN, &["true"]);
    spec.artifacts.push(ArtifactSpec {
        paths: vec!["out/".into()],
        ..ArtifactSpec::default()
    });
    control.enqueue(&spec).await.unwrap();
    let payload = runner.take_job().await;
    let form = reqwest::multipart::Form::new()
        .part(
            "file",
            reqwest::multipart::Part::bytes(b"not a zip".to_vec()).file_name("out.gz"),
        )
        .text("artifact_format", "gzip")
        .text("artifact_type", "junit");
    let response = http()
        .post(format!(
            "{}/api/v4/jobs/{}/artifacts",
            server.url(),
            job_id(&payload)
        ))
        .header("Job-Token", job_token(&payload))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let view = control.job(job_id(&payload)).await.unwrap();
    assert_eq!(view.artifacts.len(), 1);
    assert_eq!(view.artifacts[0].artifact_type, "junit");
    assert_eq!(view.artifacts[0].artifact_format, "gzip");
}
