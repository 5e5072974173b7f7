//! Every answer of the mirrored API that does not depend on GitLab's, held to
//! `api-spec/runner-api.yaml`: the status is the one GitLab gives in that case, and the spec
//! lists it for the operation.

use axum::http::Method;

use super::*;
use crate::routes::spec::{assert_same, operations, served};

/// One call a line: GitLab's status, the operation as the spec names it, the request (under
/// `/api/v4`), and a JSON body if any. `$T` is a registered runner token, `$R` another one (for
/// the reset), `$J` job 7's token; a body `big:TOKEN:N` is a JSON object with that token padded
/// to N KiB. Job 7 is queued for the first job request.
const CALLS: &str = r#"
400 POST /jobs/request           POST /jobs/request           {}
400 POST /jobs/request           POST /jobs/request           {"token": "$T", "info": [1]}
403 POST /jobs/request           POST /jobs/request           {"token": "glrt-x"}
413 POST /jobs/request           POST /jobs/request           big:$T:33
201 POST /jobs/request           POST /jobs/request           {"token": "$T"}
204 POST /jobs/request           POST /jobs/request           {"token": "$T"}
400 PUT /jobs/{id}               PUT /jobs/x7                 {"token": "$J"}
400 PUT /jobs/{id}               PUT /jobs/7                  {"state": "running"}
403 PUT /jobs/{id}               PUT /jobs/8                  {"token": "$J"}
403 PUT /jobs/{id}               PUT /jobs/-7                 {"token": "$J"}
413 PUT /jobs/{id}               PUT /jobs/7                  big:$J:1024
400 PATCH /jobs/{id}/trace       PATCH /jobs/x/trace?token=$J
400 PATCH /jobs/{id}/trace       PATCH /jobs/7/trace?token=$J
403 PATCH /jobs/{id}/trace       PATCH /jobs/8/trace?token=$J
400 POST /jobs/{id}/artifacts    POST /jobs/x/artifacts?token=$J
403 POST /jobs/{id}/artifacts    POST /jobs/8/artifacts?token=$J
400 GET /jobs/{id}/artifacts     GET /jobs/x/artifacts?token=$J
403 GET /jobs/{id}/artifacts     GET /jobs/8/artifacts?token=$J
201 POST /runners                POST /runners                {"token": "reg-a"}
400 POST /runners                POST /runners                {}
400 POST /runners                POST /runners                {"token": "reg-a", "info": [1]}
400 POST /runners                POST /runners                {
403 POST /runners                POST /runners                {"token": "reg-x"}
413 POST /runners                POST /runners                big:reg-a:65
200 POST /runners/verify         POST /runners/verify         {"token": "$T"}
200 POST /runners/verify         POST /runners/verify         {"token": "$T", "info": [1]}
400 POST /runners/verify         POST /runners/verify         {}
403 POST /runners/verify         POST /runners/verify         {"token": "glrt-x"}
413 POST /runners/verify         POST /runners/verify         big:$T:65
400 DELETE /runners/managers     DELETE /runners/managers     {"system_id": "s_1"}
400 DELETE /runners/managers     DELETE /runners/managers     {"token": "$T"}
403 DELETE /runners/managers     DELETE /runners/managers     {"token": "glrt-x", "system_id": "s_1"}
413 DELETE /runners/managers     DELETE /runners/managers     big:$T:65
204 DELETE /runners/managers     DELETE /runners/managers     {"token": "$T", "system_id": "s_1"}
400 POST /runners/reset_authentication_token  POST /runners/reset_authentication_token  {}
403 POST /runners/reset_authentication_token  POST /runners/reset_authentication_token  {"token": "glrt-x"}
413 POST /runners/reset_authentication_token  POST /runners/reset_authentication_token  big:$R:65
201 POST /runners/reset_authentication_token  POST /runners/reset_authentication_token  {"token": "$R", "info": [1]}
400 DELETE /runners              DELETE /runners              {}
403 DELETE /runners              DELETE /runners              {"token": "glrt-x"}
413 DELETE /runners              DELETE /runners              big:$T:65
204 DELETE /runners              DELETE /runners              {"token": "$T"}
501 GET /runners/router/discovery  GET /runners/router/discovery
"#;

struct Call {
    status: u16,
    operation: (Method, String),
    request: Request<Body>,
}

fn parse(line: &str, substitute: impl Fn(&str) -> String) -> Call {
    let line = substitute(line);
    let words: Vec<&str> = line.split_whitespace().collect();
    let status = words[0].parse().expect("a status");
    let operation = (words[1].parse().expect("a method"), words[2].to_string());
    let (method, path) = (words[3], words[4]);
    let body = words[5..].join(" ");
    let body = match body.strip_prefix("big:") {
        Some(spec) => {
            let (token, kib) = spec.rsplit_once(':').expect("big:TOKEN:KIB");
            let pad = "x".repeat(kib.parse::<usize>().expect("KiB") * 1024);
            json!({"token": token, "pad": pad}).to_string()
        }
        None => body,
    };
    let request = Request::builder()
        .method(method)
        .uri(format!("/api/v4{path}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    Call {
        status,
        operation,
        request,
    }
}

#[tokio::test]
async fn every_answer_of_our_own_is_gitlabs_status_and_listed_in_the_spec() {
    let spec = operations("runner-api.yaml");
    let h = harness();
    let token = h.register("reg-a").await;
    let rotated = h.register("reg-a").await;
    h.queue_job("a", 7, json!([])).await;
    let substitute = |line: &str| {
        line.replace("$T", &token)
            .replace("$R", &rotated)
            .replace("$J", "glcbt-job7")
    };
    let mut wrong = Vec::new();
    for line in CALLS.lines().filter(|l| !l.trim().is_empty()) {
        let call = parse(line, substitute);
        let answer = h.call(call.request).await.status.as_u16();
        let listed = &spec[&call.operation];
        if answer != call.status || !listed.contains(&call.status) {
            wrong.push(format!(
                "{line}\n    answered {answer}; the spec lists {listed:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_route_of_the_mirrored_api_is_in_its_spec_and_back() {
    // The spec's server URL ends in `/api/v4`; its paths start after it.
    assert_same("runner-api.yaml", &served(&route_table().list(), "/api/v4"));
}
